//! Fuzzes the JSON-schema-to-grammar converter (engine::grammar::json_schema::schema_to_gbnf,
//! behind `format` and `response_format.json_schema`) with arbitrary JSON.
//!
//! A schema comes straight from a request: converting must fail cleanly or give GBNF that our
//! own grammar compiler accepts, and whose matcher can be driven without panics.
#![no_main]

use engine::grammar::{json_schema::schema_to_gbnf, Grammar, Matcher, TokenMask};
use libfuzzer_sys::fuzz_target;

#[path = "grammar_vocab.rs"]
mod grammar_vocab;

fuzz_target!(|data: &[u8]| {
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(text) = schema_to_gbnf(&schema) else { return };
    let g = Grammar::parse(&text).unwrap_or_else(|e| panic!("generated grammar is invalid: {e}\n{text}"));
    let vocab = grammar_vocab::vocab();
    let Ok(mut m) = Matcher::new(&g, vocab.clone()) else {
        return;
    };
    let mut mask = TokenMask::new(vocab.n_tokens());
    // Walk a path through the grammar: each step takes the allowed token picked by the input's
    // bytes in turn (so different inputs walk different paths).
    for (i, &b) in data.iter().cycle().take(64).enumerate() {
        m.fill_mask(&mut mask);
        let allowed: Vec<u32> = mask.iter().filter(|&t| t != grammar_vocab::EOG).collect();
        if allowed.is_empty() {
            break;
        }
        let tok = allowed[(usize::from(b) + i) % allowed.len()];
        m.accept(tok)
            .unwrap_or_else(|e| panic!("a token of the mask is refused: {e}"));
    }
});
