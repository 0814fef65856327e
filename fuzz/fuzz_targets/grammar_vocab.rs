//! A small vocabulary for the grammar targets: every single byte, a few multi-byte tokens
//! (ASCII words, JSON punctuation, a whole and a split UTF-8 character), an end-of-generation
//! token and a special token.

use std::sync::Arc;

use engine::grammar::{TokenKind, TokenVocab};

pub const EOG: u32 = 256 + MULTI.len() as u32;

const MULTI: &[&[u8]] = &[
    b"true",
    b"null",
    b"\": ",
    b"{\"",
    b"\"}",
    b"  ",
    b"12",
    b"\xc3\xa9",
    b"\xe6\x97",
    b"\xa5",
    b"ab",
];

pub fn vocab() -> Arc<TokenVocab> {
    let mut toks: Vec<(Vec<u8>, TokenKind)> = (0..=255u8).map(|b| (vec![b], TokenKind::Text)).collect();
    toks.extend(MULTI.iter().map(|t| (t.to_vec(), TokenKind::Text)));
    toks.push((b"</s>".to_vec(), TokenKind::EndOfGeneration));
    toks.push((b"<|tool|>".to_vec(), TokenKind::Special));
    Arc::new(TokenVocab::new(toks))
}
