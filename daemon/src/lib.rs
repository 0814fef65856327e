//! `ollamars serve`: the Ollama- and OpenAI-compatible HTTP APIs and the model scheduler.
//!
//! The only crate that knows the wire formats: requests are decoded here (`wire`, `openai`,
//! `responses`, `anthropic`) into engine and registry types, and engine events are encoded back
//! (`inference`).
//!
//! - `config`: settings from defaults, the YAML file and `OLLAMARS_*` variables.
//! - `server`: routes, middleware (request ids, Host check, CORS, limits), listening, shutdown.
//! - `metrics`: `GET /metrics` (Prometheus text) and the counters behind it.
//! - `security`: API keys and scopes, the bind policy, admin endpoints for local clients.
//! - `scheduler`: loaded models, keep-alive, eviction, slots and the queue.
//! - `formats`: prompt formats by model file, read from GGUF headers before anything loads.
//! - `api`: `/api/generate`, `/api/chat`, `/api/embed`, `/api/embeddings`.
//! - `openai`: `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`.
//! - `responses`: `/v1/responses`, OpenAI's Responses API mapped onto a chat.
//! - `anthropic`: `/v1/messages`, Anthropic's Messages API mapped onto a chat.
//! - `models`: model management (`tags`, `show`, `copy`, `delete`, `pull`, `push`, `create`,
//!   `blobs`), `ps`, `version`.
//! - `inference`: shared steps of a generation and the response encoders.

pub mod anthropic;
pub mod api;
pub mod config;
pub mod error;
pub mod formats;
pub mod inference;
pub mod keep_alive;
pub mod metrics;
pub mod models;
pub mod openai;
pub mod options;
pub mod responses;
pub mod scheduler;
pub mod security;
pub mod server;
pub mod structured;
pub mod util;
pub mod wire;

pub use config::Config;
pub use server::serve;

/// Structured logs on stderr; the level comes from `OLLAMARS_LOG` (or `RUST_LOG`), default
/// `info`. Colored only on a terminal (and without `NO_COLOR`): a log file or the journal gets
/// plain lines, not escape codes.
pub fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("OLLAMARS_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .with_ansi(
            std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .try_init();
}
