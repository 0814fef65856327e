//! Tokenizers: text to token ids and back, exactly as llama.cpp does it.
//!
//! A [`Vocab`] is built once from a GGUF file's `tokenizer.ggml.*` metadata, with every lookup
//! table it needs (text to id, merge ranks, a matcher for special tokens, each token's bytes).
//! Tokenizing first carves special and user-defined tokens out of the text
//! ([`Vocab::tokenize`]'s `parse_special`), then runs the vocabulary's algorithm on the pieces in
//! between: SPM (`spm`), byte-level BPE with a pre-tokenizer (`bpe`, `pre`) or WordPiece (`wpm`).
//! Decoding goes through each token's bytes ([`Vocab::token_to_piece`], [`Vocab::detokenize`]),
//! and [`Detokenizer`] streams text out at UTF-8 boundaries.

mod bpe;
mod detok;
mod pre;
mod spm;
mod strtab;
mod unicode;
mod unicode_tables;
mod vocab;
mod wpm;

pub use detok::Detokenizer;
pub use vocab::{TokenAttr, TokenType, Vocab, VocabKind};
