//! Fuzzes the GBNF grammar compiler (engine::grammar::Grammar::parse) and the matcher built on
//! it. Layout: the grammar text, then (after a NUL byte) token ids to feed, one byte each
//! (byte b is the one-byte token b; see `grammar_vocab.rs`), plus the multi-byte tokens above 255
//! for bytes taken modulo the vocabulary.
//!
//! Grammars come from requests (llama.cpp's `grammar` field) and JSON schemas: compiling must
//! fail cleanly or give a grammar whose matcher never panics, and the matcher's token mask must
//! agree with `allows` and `accept` token by token.
#![no_main]

use engine::grammar::{Grammar, Matcher, TokenMask};
use libfuzzer_sys::fuzz_target;

#[path = "grammar_vocab.rs"]
mod grammar_vocab;

fuzz_target!(|data: &[u8]| {
    let (text, feed) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let g = match Grammar::parse(text) {
        Ok(g) => g,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let vocab = grammar_vocab::vocab();
    let Ok(mut m) = Matcher::new(&g, vocab.clone()) else {
        return;
    };
    let mut mask = TokenMask::new(vocab.n_tokens());
    // The bytes after the grammar pick tokens; without any, follow the first allowed token.
    let steps: Vec<Option<u32>> = if feed.is_empty() {
        vec![None; 48]
    } else {
        feed.iter().take(256).map(|&b| Some(pick(b))).collect()
    };
    for step in steps {
        m.fill_mask(&mut mask);
        let tok = match step {
            Some(t) => t,
            None => match mask.iter().find(|&t| t != grammar_vocab::EOG) {
                Some(t) => t,
                None => break,
            },
        };
        let allowed = mask.contains(tok);
        assert_eq!(allowed, m.allows(tok), "mask and allows disagree on token {tok}");
        let accepted = m.accept(tok).is_ok();
        assert_eq!(allowed, accepted, "mask and accept disagree on token {tok}");
        if !accepted {
            break;
        }
    }
});

/// Bytes below 0xf0 are themselves; the rest pick the multi-byte and control tokens.
fn pick(b: u8) -> u32 {
    if b < 0xf0 {
        u32::from(b)
    } else {
        256 + u32::from(b - 0xf0) % (grammar_vocab::EOG + 2 - 256)
    }
}
