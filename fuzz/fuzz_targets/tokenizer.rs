//! Fuzzes the tokenizers (engine::tokenizer::Vocab) on arbitrary bytes, with the real
//! vocabularies of llama.cpp's tokenizer tests (`shared/fixtures/vocab`: SPM, BPE with every
//! pre-tokenizer there, WordPiece).
//!
//! Layout: byte 0 picks the vocabulary, byte 1 the flags (add_special, parse_special, and
//! whether the rest is text or token ids to decode), the rest is the text (invalid UTF-8 made
//! lossy, as a request's text would already be) or little-endian u32 ids (any value, including
//! ids outside the vocabulary). Tokenizing must give ids inside the vocabulary; decoding any ids,
//! in one go or streamed, must not panic.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use engine::gguf::Gguf;
use engine::tokenizer::{Detokenizer, Vocab};
use libfuzzer_sys::fuzz_target;

fn vocabs() -> &'static [Vocab] {
    static V: OnceLock<Vec<Vocab>> = OnceLock::new();
    V.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/vocab");
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        paths.sort();
        paths
            .iter()
            .map(|p| {
                let g = Gguf::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                Vocab::from_metadata(g.metadata()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            })
            .collect()
    })
}

// The vocabularies load before fuzzing starts, so their loading is not timed as an input.
fuzz_target!(init: { vocabs(); }, |data: &[u8]| {
    let [pick, flags, rest @ ..] = data else { return };
    let vocabs = vocabs();
    let v = &vocabs[usize::from(*pick) % vocabs.len()];
    let (add_special, parse_special, ids_input) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
    let ids: Vec<u32> = if ids_input {
        rest.chunks_exact(4)
            .map(|c| {
                let id = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                // Mostly ids inside the vocabulary, sometimes anything.
                if flags & 8 != 0 {
                    id
                } else {
                    id % v.n_tokens() as u32
                }
            })
            .collect()
    } else {
        let text = String::from_utf8_lossy(rest);
        let ids = v.tokenize(&text, add_special, parse_special);
        for &id in &ids {
            assert!(
                (id as usize) < v.n_tokens(),
                "id {id} outside a vocabulary of {}",
                v.n_tokens()
            );
        }
        ids
    };
    let _ = v.detokenize(&ids, flags & 16 != 0, flags & 32 != 0);
    let mut stream = Detokenizer::for_sequence(v, flags & 64 != 0);
    let mut streamed = String::new();
    for &id in &ids {
        streamed.push_str(&stream.push(id));
        let _ = (
            v.token_text(id),
            v.token_to_piece(id, true),
            v.is_eog(id),
            v.is_control(id),
        );
    }
    streamed.push_str(&stream.finish());
});
