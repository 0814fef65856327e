//! Integration tests of the registry crate against real servers (see `common`).

mod child;
mod common;
mod crash;
mod create_show;
mod disk_full;
mod hostile;
mod proxy;
mod push;
mod resume;
mod roundtrip;
mod throughput;
