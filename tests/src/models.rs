//! The models the end-to-end tests use.
//!
//! The tiny fixtures (random weights, llama.cpp-checked) are fast and fit tests of the wire and
//! the scheduler; Gemma 3 270M and Qwen2.5-Coder 0.5B give real replies (Qwen has a chat template
//! with tools). A real model whose variable is unset is fetched with `scripts/fetch-model.sh`
//! (cached under `~/.cache/ollamars-test-models`): a test never skips silently.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A file of `shared/fixtures/tiny/`, e.g. `tiny("tiny-llama-spm-e64-q8_0.gguf")`.
pub fn tiny(name: &str) -> PathBuf {
    let p = repo_root().join("../shared/fixtures/tiny").join(name);
    assert!(p.exists(), "missing fixture {}", p.display());
    p
}

/// The smallest tiny model (llama architecture, SentencePiece vocabulary of 32000, 2 layers,
/// Q8_0): loads in milliseconds, replies are noise.
pub fn tiny_llama() -> PathBuf {
    tiny("tiny-llama-spm-e64-q8_0.gguf")
}

fn real_model(var: &str, name: &str, cell: &'static OnceLock<PathBuf>) -> PathBuf {
    cell.get_or_init(|| {
        if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            assert!(p.exists(), "{var}={} does not exist", p.display());
            return p;
        }
        let out = Command::new(repo_root().join("scripts/fetch-model.sh"))
            .arg(name)
            .output()
            .unwrap_or_else(|e| panic!("running scripts/fetch-model.sh {name}: {e}"));
        assert!(
            out.status.success(),
            "scripts/fetch-model.sh {name} failed ({var} is unset):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(p.exists(), "fetch-model.sh printed {}", p.display());
        p
    })
    .clone()
}

/// Gemma 3 270M (Q4_K_M): `OLLAMARS_TEST_GEMMA`, else fetched.
pub fn gemma() -> PathBuf {
    static CELL: OnceLock<PathBuf> = OnceLock::new();
    real_model("OLLAMARS_TEST_GEMMA", "gemma3-270m", &CELL)
}

/// Qwen2.5-Coder 0.5B Instruct (Q4_K_M, chat template with tools): `OLLAMARS_TEST_QWEN`, else
/// fetched.
pub fn qwen() -> PathBuf {
    static CELL: OnceLock<PathBuf> = OnceLock::new();
    real_model("OLLAMARS_TEST_QWEN", "qwen25-coder-0.5b", &CELL)
}
