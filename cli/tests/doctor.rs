//! `ollamars doctor`, run as the built binary on a models directory.

use std::process::{Command, Output};

use registry::manifest::{media, Layer, Manifest};
use registry::{Name, Store};
use serde_json::Value as Json;

fn doctor(root: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ollamars"))
        .arg("doctor")
        .arg("--models")
        .arg(root)
        .args(args)
        .env_remove("OLLAMARS_MODELS")
        .output()
        .unwrap()
}

fn json(out: &Output) -> Json {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    })
}

#[test]
fn doctor_checks_repairs_and_exits_non_zero_on_problems() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("models")).unwrap();
    let weights = store.write_blob_bytes(b"weights", None).unwrap();
    let config = store.write_blob_bytes(b"{}", None).unwrap();
    let m = Manifest::new(
        Layer::new(media::DOCKER_CONFIG, config.digest, config.size),
        vec![Layer::new(media::MODEL, weights.digest, weights.size)],
    );
    store
        .write_manifest(&Name::parse("m").unwrap(), &m.to_bytes())
        .unwrap();
    std::fs::write(
        store.blob_path(&weights.digest).with_file_name(".tmp-crashed"),
        b"x",
    )
    .unwrap();

    let out = doctor(store.root(), &["--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = json(&out);
    assert_eq!(r["models"], 1);
    assert_eq!(r["blobs"], 2);
    assert_eq!(r["problems"].as_array().unwrap().len(), 0);
    assert_eq!(r["debris"]["temp_files"], 1);
    let text = String::from_utf8(doctor(store.root(), &[]).stdout).unwrap();
    assert!(text.contains("the store is consistent"), "{text}");
    assert!(text.contains("--repair"), "{text}");

    // Same size, other bytes: only hashing finds it.
    std::fs::write(store.blob_path(&weights.digest), b"WEIGHTS").unwrap();
    assert!(doctor(store.root(), &["--quick"]).status.success());
    let out = doctor(store.root(), &["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let r = json(&out);
    assert_eq!(r["problems"][0]["kind"], "corrupt_blob");
    assert_eq!(r["problems"][0]["digest"], weights.digest.to_string());
    assert_eq!(r["problems"][0]["models"][0], "m:latest");
    let out = doctor(store.root(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOT consistent"));

    // Repair removes the corrupt blob; the model still needs pulling again.
    let out = doctor(store.root(), &["--repair", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["problems"][0]["removed"], true);
    assert!(!store.has_blob(&weights.digest));
    let r = json(&doctor(store.root(), &["--json"]));
    assert_eq!(r["problems"][0]["kind"], "missing_blob");
    assert!(doctor(&dir.path().join("nowhere"), &[]).status.code() == Some(1));
}
