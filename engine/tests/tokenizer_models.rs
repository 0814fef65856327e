//! The tokenizers of the two real test models against llama.cpp: ids recorded with
//! llama-cpp-python (`scripts/tokenizer-reference.py`) for a few strings, with and without BOS
//! and special-token parsing, the detokenized text, and the special and end-of-generation ids.

use std::path::{Path, PathBuf};
use std::process::Command;

use engine::gguf::Gguf;
use engine::tokenizer::{Detokenizer, Vocab};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `$VAR`, else the model fetched (and verified) by `scripts/fetch-model.sh`.
fn model(var: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let out = Command::new(repo().join("scripts/fetch-model.sh"))
        .arg(name)
        .output()
        .expect("run scripts/fetch-model.sh");
    assert!(
        out.status.success(),
        "fetch-model.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn reference() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer-models.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn opt_id(v: &Value) -> Option<u32> {
    let id = v.as_i64().unwrap();
    (id >= 0).then_some(id as u32)
}

fn check(key: &str, vocab: &Vocab) {
    let reference = reference();
    let r = &reference[key];
    let info = &r["vocab"];
    assert_eq!(vocab.n_tokens() as u64, info["n_tokens"].as_u64().unwrap());
    assert_eq!(vocab.bos(), opt_id(&info["bos"]), "bos");
    assert_eq!(vocab.eos(), opt_id(&info["eos"]), "eos");
    assert_eq!(vocab.eot(), opt_id(&info["eot"]), "eot");
    assert_eq!(vocab.nl(), opt_id(&info["nl"]), "nl");
    for (name, got) in [
        ("fim_pre", vocab.fim_pre()),
        ("fim_suf", vocab.fim_suf()),
        ("fim_mid", vocab.fim_mid()),
        ("fim_pad", vocab.fim_pad()),
        ("fim_rep", vocab.fim_rep()),
        ("fim_sep", vocab.fim_sep()),
    ] {
        assert_eq!(got, opt_id(&info[name]), "{name}");
    }
    let eog: Vec<u32> = info["eog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(vocab.eog_ids(), eog.as_slice(), "end-of-generation ids");

    let mut failures = Vec::new();
    for case in r["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let add = case["add_special"].as_bool().unwrap();
        let parse = case["parse_special"].as_bool().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = vocab.tokenize(text, add, parse);
        if got != want {
            failures.push(format!(
                "{text:?} add={add} parse={parse}\n  want {want:?}\n  got  {got:?}"
            ));
            continue;
        }
        let detok = vocab.detokenize(&got, false, false);
        if detok != case["detok"].as_str().unwrap() {
            failures.push(format!("detokenize {got:?}: {detok:?} vs {:?}", case["detok"]));
        }
        let detok = vocab.detokenize(&got, false, true);
        if detok != case["detok_special"].as_str().unwrap() {
            failures.push(format!(
                "detokenize special {got:?}: {detok:?} vs {:?}",
                case["detok_special"]
            ));
        }
        // Streaming the same tokens gives the same text.
        let mut stream = Detokenizer::for_sequence(vocab, true);
        let mut streamed: String = got.iter().map(|&t| stream.push(t)).collect();
        streamed.push_str(&stream.finish());
        if !vocab.add_space_prefix() && streamed != case["detok_special"].as_str().unwrap() {
            failures.push(format!("stream {got:?}: {streamed:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{key}: {} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn load(path: &Path) -> Vocab {
    let gguf = Gguf::open(path).unwrap();
    Vocab::from_metadata(gguf.metadata()).unwrap()
}

#[test]
fn gemma3_tokenizes_as_llama_cpp() {
    let vocab = load(&model("OLLAMARS_TEST_GEMMA", "gemma3-270m"));
    assert!(vocab.warnings().is_empty(), "{:?}", vocab.warnings());
    check("gemma", &vocab);
    // Gemma's chat markers are control tokens; <end_of_turn> ends generation.
    let turn = vocab.token_id("<end_of_turn>").unwrap();
    assert!(vocab.is_eog(turn) && vocab.is_control(turn));
    assert!(vocab.add_bos() && !vocab.add_space_prefix());
}

#[test]
fn qwen25_coder_tokenizes_as_llama_cpp() {
    let vocab = load(&model("OLLAMARS_TEST_QWEN", "qwen25-coder-0.5b"));
    assert!(vocab.warnings().is_empty(), "{:?}", vocab.warnings());
    assert_eq!(vocab.pre_tokenizer_kind(), Some("qwen2"));
    check("qwen", &vocab);
    let im_end = vocab.token_id("<|im_end|>").unwrap();
    assert!(vocab.is_eog(im_end));
    assert!(!vocab.add_bos());
}
