//! Shared helpers for the end-to-end tests in `tests/tests/`.
//!
//! - [`daemon`]: a real `ollamars serve` process on a free loopback port, with its own models
//!   directory and config file, killed on drop; HTTP helpers (JSON, NDJSON, SSE) and model
//!   creation from a GGUF file through the API (blob upload, then `/api/create` with `files`).
//! - [`models`]: where the test models are: the tiny fixtures and the two small real models.
//! - [`registry`]: a plain-HTTP `docker-registry` on loopback for push and pull.

pub mod daemon;
pub mod models;
pub mod registry;

pub use daemon::{Daemon, DaemonBuilder};
