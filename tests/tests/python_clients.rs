//! The official `ollama`, `openai` and `anthropic` Python clients (PyPI, in the virtualenv that
//! tests/python/setup-venv.sh makes) run tests/python/test_clients.py against a live daemon,
//! calling every client function, with push and pull through a local registry.

use std::path::PathBuf;
use std::process::Command;

use ollamars_tests::registry::Registry;
use ollamars_tests::{models, Daemon};

/// The client virtualenv: `OLLAMARS_TEST_VENV` (scripts/test.sh exports it), else the script's
/// default. A missing one fails the test with the command that makes it.
fn venv_python() -> PathBuf {
    let venv = std::env::var_os("OLLAMARS_TEST_VENV")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/ollamars-test-venv")
        });
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "the Python client virtualenv {} is missing: run tests/python/setup-venv.sh (scripts/test.sh does)",
        venv.display()
    );
    python
}

#[test]
fn official_python_clients_work_unchanged() {
    let python = venv_python();
    let registry = Registry::start();
    let d = Daemon::start();
    d.create_model("tiny", &models::tiny_llama());
    d.create_model("qwen", &models::qwen());
    let script = models::repo_root().join("tests/python/test_clients.py");
    let out = Command::new(python)
        .arg(&script)
        .env("OLLAMA_HOST", d.host())
        .env("TEST_GGUF", models::tiny("tiny-llama-spm-e64-q4_0.gguf"))
        .env("TEST_REGISTRY", registry.host())
        .env("TEST_CHAT_MODEL", "qwen")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .output()
        .expect("running the Python client tests");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "test_clients.py failed:\n{stdout}\n{}\n--- daemon log ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    assert!(stdout.contains("ok   check_anthropic_messages"), "{stdout}");
}
