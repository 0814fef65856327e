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
