//! The ollamars inference engine.
//!
//! Takes a GGUF file and tokens, gives logits and text. Knows nothing of HTTP, async, JSON wire
//! formats or the model store (see ARCHITECTURE.md).

pub mod error;
pub mod gguf;
pub mod quant;
pub mod sample;
pub mod stop;

pub use error::{Error, Result};

/// A token id of a model's vocabulary.
pub type TokenId = u32;
