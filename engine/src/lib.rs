//! The ollamars inference engine.
//!
//! Takes a GGUF file and tokens, gives logits and text. Knows nothing of HTTP, async, JSON wire
//! formats or the model store (see ARCHITECTURE.md).

pub mod batch;
pub mod chat;
pub mod context;
pub mod error;
pub mod generate;
pub mod gguf;
pub mod grammar;
pub mod kernels;
pub mod kv;
pub mod model;
pub mod ops;
pub mod perplexity;
pub mod quant;
pub mod sample;
pub mod stop;
pub mod template;
pub mod threads;
pub mod tokenizer;

pub use batch::Batch;
pub use context::{Context, ContextParams};
pub use error::{Error, Result};
pub use kv::{KvType, Pos, SeqId};
pub use model::{Model, ModelParams};

/// A token id of a model's vocabulary.
pub type TokenId = u32;
