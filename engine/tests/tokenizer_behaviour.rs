//! Special-token parsing, strip rules, pieces, round trips and the streaming detokenizer, on
//! llama.cpp's test vocabularies.

use std::path::Path;

use engine::gguf::Gguf;
use engine::tokenizer::{Detokenizer, TokenType, Vocab, VocabKind};

fn vocab(name: &str) -> Vocab {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../shared/fixtures/vocab/ggml-vocab-{name}.gguf"));
    let gguf = Gguf::open(&path).unwrap();
    Vocab::from_metadata(gguf.metadata()).unwrap()
}

fn fixture_texts(name: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../shared/fixtures/vocab/ggml-vocab-{name}.gguf.inp"));
    let inp = std::fs::read_to_string(path).unwrap();
    let mut texts: Vec<String> = inp.split("\n__ggml_vocab_test__\n").map(str::to_string).collect();
    texts.pop();
    texts
}

#[test]
fn control_tokens_in_text_are_parsed_only_when_asked() {
    let v = vocab("llama-bpe");
    let eot = v.token_id("<|eot_id|>").unwrap();
    let start = v.token_id("<|start_header_id|>").unwrap();
    let parsed = v.tokenize(
        "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
        false,
        true,
    );
    assert_eq!(parsed[0], start);
    assert_eq!(*parsed.last().unwrap(), eot);
    assert_eq!(parsed.len(), 6, "{parsed:?}");
    // Raw user text that merely looks like a control token stays text.
    let raw = v.tokenize("hi<|eot_id|>", false, false);
    assert!(!raw.contains(&eot), "{raw:?}");
    assert_eq!(v.detokenize(&raw, false, false), "hi<|eot_id|>");
    // Its own text around the token is tokenized as usual.
    assert_eq!(
        v.tokenize("hi<|eot_id|>", false, true),
        [v.tokenize("hi", false, false), vec![eot]].concat()
    );
}

#[test]
fn bos_and_eos_follow_the_vocabulary() {
    let spm = vocab("llama-spm");
    assert_eq!(spm.tokenize("Hello world", true, false), [1, 15043, 3186]);
    assert_eq!(spm.tokenize("", true, false), [1]);
    assert_eq!(spm.tokenize("", false, false), Vec::<u32>::new());
    let bpe = vocab("llama-bpe");
    assert_eq!(bpe.tokenize("Hello", true, false)[0], bpe.bos().unwrap());
    assert!(bpe.add_bos() && !bpe.add_eos());
}

#[test]
fn spm_space_prefix_follows_special_tokens() {
    let v = vocab("llama-spm");
    // After a special token the text gets the space prefix again, as at the start.
    let eos = v.eos().unwrap();
    let ids = v.tokenize("Hello</s>world", false, true);
    assert_eq!(
        ids,
        [
            v.tokenize("Hello", false, false),
            vec![eos],
            v.tokenize("world", false, false)
        ]
        .concat()
    );
    assert_eq!(v.detokenize(&ids, false, true), "Hello</s> world");
}

#[test]
fn phi3_special_tokens_eat_the_whitespace_after_them() {
    let v = vocab("phi-3");
    let user = v.token_id("<|user|>").unwrap();
    let ids = v.tokenize("<|user|>  \n Hello", false, true);
    assert_eq!(ids[0], user);
    assert_eq!(ids, v.tokenize("<|user|>Hello", false, true));
}

#[test]
fn pieces_render_bytes_spaces_and_control_tokens() {
    let v = vocab("llama-spm");
    let hello = v.token_id("▁Hello").unwrap();
    assert_eq!(v.token_to_piece(hello, false), b" Hello");
    let nl = v.token_id("<0x0A>").unwrap();
    assert_eq!(v.token_type(nl), TokenType::Byte);
    assert_eq!(v.token_to_piece(nl, false), b"\n");
    assert_eq!(v.nl(), Some(nl));
    let eos = v.eos().unwrap();
    assert_eq!(v.token_to_piece(eos, false), b"");
    assert_eq!(v.token_to_piece(eos, true), b"</s>");
    assert_eq!(v.token_bytes(eos), b"</s>");
    assert!(v.is_eog(eos));
    // GPT-2 byte-level pieces map back to bytes.
    let b = vocab("gpt-2");
    let id = b.token_id("Ġworld").unwrap();
    assert_eq!(b.token_to_piece(id, false), b" world");
    assert_eq!(b.token_to_piece(u32::MAX, true), b"");
}

#[test]
fn detokenize_inverts_tokenize() {
    let mut checked = 0;
    for name in [
        "llama-spm",
        "phi-3",
        "llama-bpe",
        "qwen2",
        "qwen35",
        "gpt-2",
        "deepseek-coder",
        "deepseek-llm",
        "falcon",
        "mpt",
        "refact",
        "starcoder",
    ] {
        let v = vocab(name);
        for text in fixture_texts(name) {
            let ids = v.tokenize(&text, false, false);
            let back = v.detokenize(&ids, false, false);
            // BPE vocabularies with clean_up_tokenization_spaces change " ," and " 's" on
            // purpose, as Hugging Face does; everything else comes back as it went in.
            let cleaned = [" ?", " !", " .", " ,", " '"].iter().any(|p| text.contains(p));
            if v.kind() == VocabKind::Bpe && cleaned && back != text {
                continue;
            }
            assert_eq!(back, text, "{name}: {ids:?}");
            checked += 1;
        }
    }
    assert!(checked > 450, "{checked}");
}

#[test]
fn stream_holds_back_split_characters() {
    let v = vocab("llama-spm");
    // Llama 2 has no token for these: they come out as <0xXX> byte tokens.
    let ids = v.tokenize("a😀b", false, false);
    let bytes: Vec<u32> = "😀"
        .bytes()
        .map(|b| v.token_id(&format!("<0x{b:02X}>")).unwrap())
        .collect();
    assert!(ids.windows(4).any(|w| w == bytes.as_slice()), "{ids:?}");
    let mut stream = Detokenizer::new(&v, false);
    let out: Vec<String> = ids.iter().map(|&t| stream.push(t)).collect();
    // Nothing of the emoji appears until its last byte has arrived, then all of it at once.
    assert!(out.iter().all(|s| !s.contains('\u{FFFD}')));
    let at = out.iter().position(|s| s.contains('😀')).unwrap();
    assert!(out[at - 3..at].iter().all(String::is_empty), "{out:?}");
    assert_eq!(out.concat() + &stream.finish(), " a😀b");

    // A sequence stream drops the SPM space prefix, as detokenize does.
    let mut stream = Detokenizer::for_sequence(&v, false);
    let text: String = ids.iter().map(|&t| stream.push(t)).collect();
    assert_eq!(text, v.detokenize(&ids, false, false));
}

#[test]
fn stream_replaces_bytes_that_cannot_become_text() {
    let v = vocab("llama-spm");
    let byte = |b: u8| v.token_id(&format!("<0x{b:02X}>")).unwrap();
    let mut stream = Detokenizer::new(&v, false);
    assert_eq!(stream.push(byte(0xF0)), "");
    assert!(stream.has_pending());
    // A lead byte followed by ASCII: the lead can never complete.
    assert_eq!(stream.push(byte(b'A')), "\u{FFFD}A");
    assert_eq!(stream.push(byte(0xFF)), "\u{FFFD}");
    assert_eq!(stream.push(byte(0xE6)), "");
    assert_eq!(stream.push(byte(0x97)), "");
    // The end of the stream with a character cut short.
    assert_eq!(stream.finish(), "\u{FFFD}");
}

#[test]
fn clean_up_spaces_as_hugging_face() {
    let v = vocab("gpt-2");
    let ids = v.tokenize("Hello , world . It ' s", false, false);
    assert_eq!(v.detokenize(&ids, false, false), "Hello, world. It's");
}

#[test]
fn vocab_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Vocab>();
}

/// Arbitrary text, including pieces of special tokens and invalid-looking byte sequences, never
/// panics, and arbitrary ids detokenize without panicking.
#[test]
fn any_text_and_any_ids_are_handled() {
    let alphabet: Vec<char> = "a Z9'’\n\t\r  é\u{301}中😀<|>/s_▁\u{0}\u{FEFF}\u{2028}"
        .chars()
        .collect();
    let mut seed = 0x9E3779B97F4A7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for name in [
        "llama-spm",
        "phi-3",
        "llama-bpe",
        "qwen2",
        "gpt-2",
        "deepseek-llm",
        "falcon",
        "bert-bge",
    ] {
        let v = vocab(name);
        for _ in 0..300 {
            let len = (next() % 40) as usize;
            let mut text: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            if next() % 3 == 0 {
                let id = (next() % v.n_tokens() as u64) as u32;
                text.push_str(v.token_text(id).unwrap());
            }
            for (add, parse) in [(false, false), (true, true)] {
                let ids = v.tokenize(&text, add, parse);
                assert!(ids.iter().all(|&id| (id as usize) < v.n_tokens()));
                let _ = v.detokenize(&ids, true, parse);
            }
        }
        let junk: Vec<u32> = (0..64).map(|_| next() as u32).collect();
        let mut stream = Detokenizer::new(&v, true);
        for &id in &junk {
            let _ = stream.push(id);
        }
        let _ = stream.finish();
        let _ = v.detokenize(&junk, true, true);
    }
}
