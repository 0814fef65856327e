//! Integration tests of the registry crate against real servers (see `common`).

mod common;
mod roundtrip;
