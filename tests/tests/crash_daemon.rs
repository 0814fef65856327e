//! kill -9 of the daemon itself (registry/tests/it/crash.rs kills a registry operation in a
//! child process) during a blob upload, at random points, 20 times. After every kill the store
//! passes `ollamars doctor` (every manifest's blobs exist and hash right, every blob under its
//! final name hashes to it, so no partial blob is visible), a restarted daemon lists only whole
//! models, and the upload, repeated, succeeds.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use ollamars_tests::daemon::{ollamars_bin, sha256_file};
use ollamars_tests::{models, Daemon};
use registry::store::{CheckOptions, CleanupOptions};
use registry::Store;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

const ROUNDS: u64 = 20;

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    h.write_u128(now.as_nanos());
    h.finish()
}

/// Pseudo-random bytes (xorshift) that neither compress nor repeat between seeds.
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn sha256(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn daemon_on(models: &Path) -> Daemon {
    Daemon::builder().models_dir(models).start()
}

/// `ollamars doctor` (hashing every blob) passes on `models`, and the store has no blob
/// under its final name whose bytes are not its name's.
fn assert_doctor_clean(models: &Path, when: &str) {
    let out = Command::new(ollamars_bin())
        .args(["doctor", "--models"])
        .arg(models)
        .output()
        .expect("running ollamars doctor");
    assert!(
        out.status.success(),
        "{when}: doctor failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let r = Store::open(models)
        .unwrap()
        .check(&CheckOptions::default())
        .unwrap();
    assert!(r.is_consistent(), "{when}: {:?}", r.problems);
}

/// Sleeps a random part of `window`, then kills the daemon; `true` if `done` was not yet set
/// (the operation had not answered).
fn kill_at_random(d: &mut Daemon, window: Duration, done: &std::sync::atomic::AtomicBool) -> bool {
    let at = Duration::from_micros(rand_u64() % window.as_micros().max(1) as u64);
    thread::sleep(at);
    let killed_early = !done.load(std::sync::atomic::Ordering::SeqCst);
    d.kill_9();
    killed_early
}

/// After the rounds: repair (no grace periods) leaves no temporary file, dead partial or stale
/// pin behind.
fn assert_repairable(models: &Path) {
    let store = Store::open(models).unwrap();
    let opts = CheckOptions {
        repair: true,
        cleanup: CleanupOptions {
            blob_grace: Duration::ZERO,
            temp_grace: Duration::ZERO,
            resumable_max_age: Some(Duration::ZERO),
        },
        ..CheckOptions::default()
    };
    store.check(&opts).unwrap();
    let r = store.check(&CheckOptions::default()).unwrap();
    assert!(r.is_consistent(), "{:?}", r.problems);
    assert_eq!(
        r.debris.temp_files + r.debris.dead_partials + r.debris.stale_pins,
        0,
        "{:?}",
        r.debris
    );
}

fn model_names(d: &Daemon) -> Vec<String> {
    let tags: Value = d.get("/api/tags").json().unwrap();
    let mut names: Vec<String> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Streams `body` as `POST /api/blobs/DIGEST` on a raw connection, `chunk` bytes every `pause`,
/// and returns the reply's status line (an error once the daemon is killed).
fn slow_upload(
    port: u16,
    digest: &str,
    body: &[u8],
    chunk: usize,
    pause: Duration,
) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        s,
        "POST /api/blobs/{digest} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    for part in body.chunks(chunk) {
        s.write_all(part)?;
        thread::sleep(pause);
    }
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    Ok(reply.lines().next().unwrap_or_default().to_string())
}

#[test]
fn kill_9_during_blob_upload() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    let mut d = daemon_on(&models);
    // A whole model in the store, which every kill must leave alone.
    d.create_model("tiny", &models::tiny_llama());
    let (chunk, pause) = (16 << 10, Duration::from_millis(4));
    let mut killed = 0;
    for round in 0..ROUNDS {
        let body = random_bytes((256 << 10) + (rand_u64() % (768 << 10)) as usize, round + 1);
        let digest = sha256(&body);
        // The window: the whole upload (a pause per chunk) and a little after its end, so some
        // kills land while the blob is being committed.
        let window = pause * (body.len() / chunk + 1) as u32 + Duration::from_millis(30);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let uploader = {
            let (port, digest, body, done) = (d.port(), digest.clone(), body.clone(), done.clone());
            thread::spawn(move || {
                let r = slow_upload(port, &digest, &body, chunk, pause);
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                r
            })
        };
        killed += u64::from(kill_at_random(&mut d, window, &done));
        if let Ok(status) = uploader.join().unwrap() {
            // Answered before the kill: it must have been stored.
            assert!(
                status.contains(" 201 ") || status.is_empty(),
                "round {round}: {status}"
            );
        }
        assert_doctor_clean(&models, &format!("upload round {round}, after the kill"));
        let blob = models.join("blobs").join(digest.replace(':', "-"));
        if blob.exists() {
            assert_eq!(
                sha256_file(&blob),
                digest,
                "round {round}: a partial blob under its final name"
            );
        }

        d = daemon_on(&models);
        assert_eq!(model_names(&d), ["tiny:latest"], "round {round}");
        let r = d
            .client()
            .post(d.url(&format!("/api/blobs/{digest}")))
            .body(body.clone())
            .send()
            .unwrap();
        assert!(
            matches!(r.status().as_u16(), 200 | 201),
            "round {round}: {}",
            r.status()
        );
        assert_eq!(
            d.client()
                .head(d.url(&format!("/api/blobs/{digest}")))
                .send()
                .unwrap()
                .status(),
            200
        );
        assert_eq!(sha256_file(&blob), digest, "round {round}");
        assert_doctor_clean(&models, &format!("upload round {round}, after uploading again"));
    }
    assert!(
        killed >= ROUNDS / 2,
        "only {killed} of {ROUNDS} uploads were killed before they ended"
    );
    // The model still answers.
    let r = d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "hi", "stream": false, "options": {"num_predict": 2}}),
    );
    assert_eq!(r["done"], true);
    d.kill_9();
    assert_repairable(&models);
}
