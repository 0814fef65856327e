//! Turning logits into the next token.
//!
//! [`Sampler`] runs llama.cpp's common sampler chain for Ollama's options:
//! `[grammar] → penalties → top-k → typical → top-p → min-p → temperature → dist`, or
//! `[grammar] → penalties → temperature → mirostat` when Mirostat is on. Temperature comes after the
//! filters, so they see the model's own distribution; temperature 0 is greedy.
//!
//! Everything is single-threaded integer-seeded arithmetic ([`rng::Mt19937`], llama.cpp's
//! generator), so the same logits, options and seed give the same tokens on every run.
//!
//! The vocabulary is never sorted as a whole: top-k is a one-pass selection ([`steps::select_top`]),
//! and a grammar is checked lazily on the best candidates before a full mask is computed.

mod logprobs;
mod options;
mod penalties;
pub mod rng;
mod sampler;
pub mod steps;

pub use logprobs::{log_sum_exp, token_logprobs, TokenLogprobs, MAX_TOP_LOGPROBS};
pub use options::SamplingOptions;
pub use sampler::{GrammarGate, Sampler};

#[cfg(test)]
mod tests;
