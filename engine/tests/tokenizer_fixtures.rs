//! llama.cpp's tokenizer tests: every string of every vocabulary in `shared/fixtures/vocab/`
//! must tokenize to the ids llama.cpp gives (add_special = false, parse_special = false).

use std::path::{Path, PathBuf};

use engine::gguf::Gguf;
use engine::tokenizer::Vocab;

fn vocab_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/vocab")
}

struct Case {
    text: String,
    ids: Vec<u32>,
}

fn load(name: &str) -> (Vocab, Vec<Case>) {
    let path = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
    let gguf = Gguf::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let vocab = Vocab::from_metadata(gguf.metadata()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let inp = std::fs::read_to_string(path.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(path.with_extension("gguf.out")).unwrap();
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(
        texts.pop(),
        Some(""),
        "{name}: the .inp file ends with a separator"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        texts.len(),
        lines.len(),
        "{name}: .inp and .out disagree on the count"
    );
    let cases = texts
        .iter()
        .zip(lines)
        .map(|(t, l)| Case {
            text: t.to_string(),
            ids: l.split_whitespace().map(|x| x.parse().unwrap()).collect(),
        })
        .collect();
    (vocab, cases)
}

const VOCABS: &[&str] = &[
    "llama-spm",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "gpt-2",
    "phi-3",
    "bert-bge",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "mpt",
    "refact",
    "starcoder",
];

#[test]
fn every_fixture_string_tokenizes_as_llama_cpp() {
    let mut failures = Vec::new();
    let mut report = String::new();
    for name in VOCABS {
        let (vocab, cases) = load(name);
        let mut passed = 0;
        for case in &cases {
            let got = vocab.tokenize(&case.text, false, false);
            if got == case.ids {
                passed += 1;
            } else {
                failures.push(format!(
                    "{name}: {:?}\n  want {:?}\n  got  {:?}",
                    case.text, case.ids, got
                ));
            }
        }
        report.push_str(&format!("{name}: {passed}/{} passed\n", cases.len()));
    }
    eprintln!("{report}");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A vocabulary whose metadata is inconsistent is an error naming the key, never a panic.
#[test]
fn bad_tokenizer_metadata_is_a_clear_error() {
    use engine::gguf::{Array, Metadata, Value};
    let strings = |v: &[&str]| Value::Array(Array::String(v.iter().map(|s| s.to_string()).collect()));
    let base = || {
        let mut md = Metadata::new();
        md.set("tokenizer.ggml.model", Value::String("gpt2".into()));
        md.set("tokenizer.ggml.pre", Value::String("gpt-2".into()));
        md.set("tokenizer.ggml.tokens", strings(&["a", "b", "ab"]));
        md.set("tokenizer.ggml.merges", strings(&["a b"]));
        md
    };
    let v = Vocab::from_metadata(&base()).unwrap();
    assert_eq!(v.tokenize("ab", false, false), [2]);

    let err = |md: &Metadata| Vocab::from_metadata(md).unwrap_err().to_string();
    let mut md = base();
    md.set("tokenizer.ggml.tokens", strings(&["a", "b", "a"]));
    assert!(err(&md).contains("duplicate token"), "{}", err(&md));
    let mut md = base();
    md.remove("tokenizer.ggml.merges");
    assert!(err(&md).contains("tokenizer.ggml.merges"));
    let mut md = base();
    md.set("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0])));
    assert!(err(&md).contains("tokenizer.ggml.scores"));
    let mut md = base();
    md.set("tokenizer.ggml.model", Value::String("t5".into()));
    assert!(err(&md).contains("not supported"));
    let mut md = base();
    md.set("tokenizer.ggml.pre", Value::String("kimi-k2".into()));
    assert!(err(&md).contains("kimi-k2"));
    let mut md = base();
    md.set("tokenizer.ggml.add_bos_token", Value::Bool(true));
    md.set("tokenizer.ggml.bos_token_id", Value::U32(99));
    // BPE's default BOS (11) is out of range here, and so is the file's: no BOS to add.
    assert!(err(&md).contains("add_bos_token"), "{}", err(&md));
    // An unknown pre-tokenizer falls back to the default one, with a warning.
    let mut md = base();
    md.set("tokenizer.ggml.pre", Value::String("something-new".into()));
    let v = Vocab::from_metadata(&md).unwrap();
    assert_eq!(v.pre_tokenizer_kind(), Some("default"));
    assert!(v.warnings()[0].contains("something-new"));
}
