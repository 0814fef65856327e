//! `ollamars tokenize` run as a user would, on llama.cpp's Llama 2 test vocabulary.

use std::path::Path;
use std::process::Command;

fn vocab(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../shared/fixtures/vocab/ggml-vocab-{name}.gguf"));
    p.to_string_lossy().into_owned()
}

fn ollamars(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ollamars"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn prints_ids_and_pieces_like_llama_tokenize() {
    let model = vocab("llama-spm");
    let (ok, out, err) = ollamars(&["tokenize", "-m", &model, "Hello world"]);
    assert!(ok, "{err}");
    assert_eq!(out, "     1 -> '<s>'\n 15043 -> ' Hello'\n  3186 -> ' world'\n");

    let (ok, out, _) = ollamars(&["tokenize", "-m", &model, "--ids", "--no-bos", "Hello world"]);
    assert!(ok);
    assert_eq!(out, "[15043, 3186]\n");
}

#[test]
fn special_tokens_are_parsed_unless_told_not_to() {
    let model = vocab("llama-spm");
    let (_, out, _) = ollamars(&["tokenize", "-m", &model, "--ids", "--no-bos", "</s>"]);
    assert_eq!(out, "[2]\n");
    let (_, out, _) = ollamars(&[
        "tokenize",
        "-m",
        &model,
        "--ids",
        "--no-bos",
        "--no-parse-special",
        "</s>",
    ]);
    assert_ne!(out, "[2]\n");
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let (ok, _, err) = ollamars(&["tokenize", "-m", "/nonexistent/model.gguf", "hi"]);
    assert!(!ok);
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
}
