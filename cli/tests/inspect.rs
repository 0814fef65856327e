//! `ollamars inspect`, run as the built binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use engine::gguf::{Gguf, GgufWriter, SplitBy};
use serde_json::Value as Json;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture(name: &str) -> PathBuf {
    repo().join("../shared/fixtures").join(name)
}

/// The real Gemma 3 270M: `$OLLAMARS_TEST_GEMMA`, else fetched (and verified) by the script.
fn gemma() -> PathBuf {
    if let Some(p) = std::env::var_os("OLLAMARS_TEST_GEMMA") {
        return PathBuf::from(p);
    }
    let out = Command::new(repo().join("scripts/fetch-model.sh"))
        .arg("gemma3-270m")
        .output()
        .expect("run scripts/fetch-model.sh");
    assert!(
        out.status.success(),
        "fetch-model.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn inspect(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ollamars"))
        .arg("inspect")
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

fn inspect_ok(args: &[&str], file: &Path) -> String {
    let out = inspect(args, file);
    assert!(
        out.status.success(),
        "inspect {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn inspect_json(file: &Path) -> Json {
    serde_json::from_str(&inspect_ok(&["--json"], file)).unwrap()
}

#[test]
fn gemma_3_270m() {
    let path = gemma();
    let text = inspect_ok(&[], &path);
    assert!(text.contains("\ntensors (236)\n"), "{text}");
    assert!(text.contains("file type   Q4_K_M (Q4_K - Medium)\n"), "{text}");
    assert!(text.contains("format      GGUF v3\n"), "{text}");
    assert!(text.contains("parameters  268.10 M (268,098,176)\n"), "{text}");
    assert!(text.contains("metadata (33 keys)"), "{text}");
    // Long arrays are summarised, not printed whole.
    assert!(text.contains("... (262144 values)]"), "{text}");
    assert!(text.len() < 64 * 1024, "{} bytes of output", text.len());
    let row = text.lines().find(|l| l.contains(" token_embd.weight ")).unwrap();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [
            "token_embd.weight",
            "Q8_0",
            "[640,",
            "262144]",
            "6527680",
            "178257920"
        ]
    );

    let doc = inspect_json(&path);
    assert_eq!(doc["version"], 3);
    assert_eq!(doc["tensors"].as_array().unwrap().len(), 236);
    assert_eq!(doc["file_type"]["name"], "Q4_K_M");
    assert_eq!(doc["file_type"]["description"], "Q4_K - Medium");
    assert_eq!(doc["file_type"]["id"], 15);
    assert_eq!(doc["file_type"]["guessed"], false);
    assert_eq!(doc["parameters"], 268_098_176u64);
    assert_eq!(doc["size"], std::fs::metadata(&path).unwrap().len());
    let tokens = doc["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["key"] == "tokenizer.ggml.tokens")
        .unwrap();
    assert_eq!(tokens["type"], "array");
    assert_eq!(tokens["element_type"], "string");
    assert_eq!(tokens["length"], 262144);
    assert_eq!(tokens["truncated"], true);
    assert_eq!(tokens["value"][0], "<pad>");
    let embd = doc["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "token_embd.weight")
        .unwrap();
    assert_eq!(embd["type"], "Q8_0");
    assert_eq!(embd["shape"], serde_json::json!([640, 262144]));
    assert_eq!(embd["size"], 178_257_920u64);
    // Tensor sizes add up to what the types and shapes say, and lie inside the file.
    for t in doc["tensors"].as_array().unwrap() {
        let end = t["offset"].as_u64().unwrap() + t["size"].as_u64().unwrap();
        assert!(end <= doc["size"].as_u64().unwrap());
    }
}

#[test]
fn every_fixture_inspects_with_its_recorded_file_type() {
    for (name, want) in [
        ("tiny/tiny-llama-spm-e64-f32.gguf", "F32"),
        ("tiny/tiny-llama-spm-e64-q4_0.gguf", "Q4_0"),
        ("tiny/tiny-llama-spm-e256-q4_k_m.gguf", "Q4_K_M"),
        ("quant/q3_K_S.gguf", "Q3_K_S"),
        ("quant/iq4_xs.gguf", "IQ4_XS"),
        ("quant/bf16.gguf", "BF16"),
    ] {
        let doc = inspect_json(&fixture(name));
        assert_eq!(doc["file_type"]["name"], want, "{name}");
        assert_eq!(doc["file_type"]["guessed"], false, "{name}");
    }
    let text = inspect_ok(&[], &fixture("tiny/tiny-llama-spm-e64-q4_0.gguf"));
    assert!(text.contains("file type   Q4_0\n"), "{text}");
}

/// Without `general.file_type`, the type is guessed from the tensors as llama.cpp does, and
/// marked as guessed.
#[test]
fn file_type_is_guessed_when_not_recorded() {
    let dir = tempfile::tempdir().unwrap();
    for (name, want) in [
        ("tiny/tiny-llama-spm-e256-q4_k_m.gguf", "Q4_K_M"),
        ("tiny/tiny-llama-spm-e64-f16.gguf", "F16"),
        ("quant/q5_K_S.gguf", "Q5_K_M"),
    ] {
        let model = Gguf::open(fixture(name)).unwrap();
        let mut w = GgufWriter::from_model(&model).unwrap();
        assert!(w.metadata.remove("general.file_type").is_some());
        let path = dir.path().join("no-ftype.gguf");
        w.write_file(&path, |i, _| Ok(model.tensor_data(&model.tensors()[i]).into()))
            .unwrap();
        let doc = inspect_json(&path);
        assert_eq!(doc["file_type"]["name"], want, "{name}");
        assert_eq!(doc["file_type"]["guessed"], true, "{name}");
        let text = inspect_ok(&[], &path);
        assert!(text.contains(&format!("file type   {want} (guessed)")), "{text}");
    }
}

#[test]
fn a_split_model_is_inspected_whole() {
    let dir = tempfile::tempdir().unwrap();
    let model = Gguf::open(fixture("tiny/tiny-llama-spm-e64-q8_0.gguf")).unwrap();
    let parts = GgufWriter::from_model(&model)
        .unwrap()
        .write_split(dir.path().join("m"), SplitBy::Tensors(8), |i, _| {
            Ok(model.tensor_data(&model.tensors()[i]).into())
        })
        .unwrap();
    let doc = inspect_json(&parts[0]);
    assert_eq!(doc["files"].as_array().unwrap().len(), parts.len());
    assert_eq!(doc["tensors"].as_array().unwrap().len(), model.tensors().len());
    assert_eq!(doc["tensors"][8]["file"], 1);
    let text = inspect_ok(&[], &parts[0]);
    assert!(
        text.contains(&format!("parts       {} (split model)", parts.len())),
        "{text}"
    );
    assert!(text
        .lines()
        .any(|l| l.trim_start().starts_with("name ") && l.contains(" part ")));
}

#[test]
fn bad_files_give_one_line_and_fail() {
    let dir = tempfile::tempdir().unwrap();
    let truncated = dir.path().join("truncated.gguf");
    let bytes = std::fs::read(fixture("tiny/tiny-llama-spm-e64-q4_0.gguf")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let ggml = dir.path().join("old.bin");
    std::fs::write(&ggml, b"tjgg\x03\0\0\0 and so on").unwrap();
    let missing = dir.path().join("missing.gguf");
    let directory = dir.path().join("dir.gguf");
    std::fs::create_dir(&directory).unwrap();
    let split = dir.path().join("m-00002-of-00003.gguf");
    std::fs::copy(
        fixture("tiny/tiny-llama-spm-e64-q4_0.gguf"),
        dir.path().join("x.gguf"),
    )
    .unwrap();
    {
        let model = Gguf::open(dir.path().join("x.gguf")).unwrap();
        GgufWriter::from_model(&model)
            .unwrap()
            .write_split(dir.path().join("m"), SplitBy::Tensors(7), |i, _| {
                Ok(model.tensor_data(&model.tensors()[i]).into())
            })
            .unwrap();
    }
    for (file, want) in [
        (&truncated, "extends past the end of the file"),
        (&ggml, "old GGJT model format"),
        (&missing, "No such file"),
        (&directory, "not a regular file"),
        (&split, "open its first part"),
    ] {
        let out = inspect(&[], file);
        assert_eq!(out.status.code(), Some(1), "{}", file.display());
        assert!(out.stdout.is_empty());
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("Error: "), "{err}");
        assert!(err.contains(&file.display().to_string()), "{err}");
        assert!(err.contains(want), "{err}");
    }
}
