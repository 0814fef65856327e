//! The harness itself: a daemon starts on its own port and store, a model created from a GGUF
//! file through the API answers, and the process is gone after drop.

use ollamars_tests::{daemon::ndjson, models, Daemon};
use serde_json::json;

#[test]
fn daemon_starts_creates_a_model_and_answers() {
    let d = Daemon::start();
    // What clients probing for an Ollama server compare.
    assert_eq!(d.get("/").text().unwrap(), "Ollama is running");
    let v = d.get("/api/version").json::<serde_json::Value>().unwrap();
    assert_eq!(v["version"], "0.33.0", "{v}");
    assert_eq!(v["ollamars_version"], env!("CARGO_PKG_VERSION"), "{v}");
    d.create_model("tiny", &models::tiny_llama());
    // The blob landed in this daemon's own store.
    assert!(std::fs::read_dir(d.models_dir().join("blobs")).unwrap().count() >= 1);
    let tags = d.get("/api/tags").json::<serde_json::Value>().unwrap();
    assert_eq!(tags["models"][0]["name"], "tiny:latest", "{tags}");
    let r = d.post(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "hello", "options": {"num_predict": 3, "seed": 1}}),
    );
    assert_eq!(r.status(), 200);
    let lines = ndjson(r);
    let last = lines.last().unwrap();
    assert_eq!(last["done"], true, "{lines:?}");
    assert_eq!(last["eval_count"], 3, "{last}");

    let pid = d.pid();
    drop(d);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z ")),
        "the daemon outlived its handle"
    );
}

#[test]
fn two_daemons_do_not_share_anything() {
    let a = Daemon::start();
    let b = Daemon::builder().env("OLLAMARS_KEEP_ALIVE", "0").start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.models_dir(), b.models_dir());
    a.create_model("only-a", &models::tiny_llama());
    let tags = b.get("/api/tags").json::<serde_json::Value>().unwrap();
    assert_eq!(tags["models"].as_array().unwrap().len(), 0, "{tags}");
}
