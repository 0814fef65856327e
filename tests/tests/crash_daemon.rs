//! kill -9 of the daemon itself (not of a registry operation in a child process, as
//! registry/tests/it/crash.rs does) during a blob upload, a create with quantize, a push and a
//! pull, at random points of the operation's measured duration, until 20 kills have cut each
//! operation (at most 40 rounds). After every kill the store passes `ollamars doctor` (every
//! manifest's blobs exist and hash right, every blob under its final name hashes to it, so no
//! partial blob is visible), a restarted daemon lists only whole models, and the operation,
//! repeated, succeeds with the right result. Each test prints its rounds and window.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use ollamars_tests::daemon::{ollamars_bin, sha256_file};
use ollamars_tests::registry::Registry;
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

/// One kill round: `op` starts the operation on a background thread (its result: the reply's
/// status, `None` if no whole reply came), SIGKILL of the daemon at a random point of `window`
/// (the operation's duration), then `ollamars doctor` on the store, and a fresh daemon on it in
/// `d`. A reply that came before the kill must be one of `ok`. Returns `true` if the client got
/// no whole reply (the kill cut the operation).
fn kill_round(
    d: &mut Daemon,
    window: Duration,
    ok: &[u16],
    when: &str,
    op: impl FnOnce(&Daemon) -> thread::JoinHandle<Option<u16>>,
) -> bool {
    let op = op(d);
    thread::sleep(Duration::from_micros(
        rand_u64() % window.as_micros().max(1) as u64,
    ));
    d.kill_9();
    let reply = op.join().unwrap();
    if let Some(status) = reply {
        assert!(ok.contains(&status), "{when}: {status} before the kill");
    }
    let models = d.models_dir().to_path_buf();
    assert_doctor_clean(&models, &format!("{when}, after the kill"));
    *d = daemon_on(&models);
    reply.is_none()
}

/// `POST path body` on a background thread, for [`kill_round`].
fn post_json(path: &str, body: &Value) -> impl FnOnce(&Daemon) -> thread::JoinHandle<Option<u16>> {
    let (path, body) = (path.to_string(), body.clone());
    move |d: &Daemon| {
        let (client, url) = (d.client().clone(), d.url(&path));
        thread::spawn(move || {
            let r = client.post(url).json(&body).send().ok()?;
            let status = r.status().as_u16();
            r.bytes().ok().map(|_| status)
        })
    }
}

#[test]
fn kill_9_during_blob_upload() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    let mut d = daemon_on(&models);
    // A whole model in the store, which every kill must leave alone.
    d.create_model("tiny", &models::tiny_llama());
    let (chunk, pause) = (16 << 10, Duration::from_millis(4));
    let (mut killed, mut round, mut windows) = (0, 0, Duration::ZERO);
    while another_round(round, killed, "upload") {
        let body = random_bytes((256 << 10) + (rand_u64() % (768 << 10)) as usize, round + 1);
        let digest = sha256(&body);
        // The window: the whole upload (a pause per chunk) and a little after its end, so some
        // kills land while the blob is being committed.
        let window = pause * (body.len() / chunk + 1) as u32 + Duration::from_millis(30);
        windows += window;
        let when = format!("upload round {round}");
        killed += u64::from(kill_round(&mut d, window, &[201], &when, |d| {
            let (port, digest, body) = (d.port(), digest.clone(), body.clone());
            thread::spawn(move || {
                let status = slow_upload(port, &digest, &body, chunk, pause).ok()?;
                // "HTTP/1.1 201 Created"; nothing at all if the kill closed the connection.
                status.split(' ').nth(1)?.parse().ok()
            })
        }));
        let blob = models.join("blobs").join(digest.replace(':', "-"));
        if blob.exists() {
            assert_eq!(
                sha256_file(&blob),
                digest,
                "{when}: a partial blob under its final name"
            );
        }
        assert_eq!(model_names(&d), ["tiny:latest"], "{when}");
        let r = d
            .client()
            .post(d.url(&format!("/api/blobs/{digest}")))
            .body(body.clone())
            .send()
            .unwrap();
        assert!(matches!(r.status().as_u16(), 200 | 201), "{when}: {}", r.status());
        assert_eq!(
            d.client()
                .head(d.url(&format!("/api/blobs/{digest}")))
                .send()
                .unwrap()
                .status(),
            200
        );
        assert_eq!(sha256_file(&blob), digest, "{when}");
        assert_doctor_clean(&models, &format!("{when}, after uploading again"));
        round += 1;
    }
    // The model still answers.
    let r = d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "hi", "stream": false, "options": {"num_predict": 2}}),
    );
    assert_eq!(r["done"], true);
    d.kill_9();
    assert_repairable(&models);
    report("upload", round, windows / round as u32, started);
}

/// Runs `path` with `body` to its end and returns how long it took.
fn run_ok(d: &Daemon, path: &str, body: &Value) -> Duration {
    let t = Instant::now();
    let r = d.post_ok(path, body);
    assert_eq!(r["status"], "success", "{r}");
    t.elapsed()
}

fn delete(d: &Daemon, model: &str) -> u16 {
    d.delete_model(model).status().as_u16()
}

fn manifest_bytes(models: &Path, name: &str) -> Vec<u8> {
    Store::open(models)
        .unwrap()
        .read_manifest(&registry::Name::parse(name).unwrap())
        .unwrap()
        .bytes
}

/// The window to kill an operation in: the median of three runs of `op` as the rounds run it
/// (so most kills land inside the operation, and some in its last steps).
fn median_of_3(mut op: impl FnMut() -> Duration) -> Duration {
    let mut t = [op(), op(), op()];
    t.sort();
    t[1]
}

/// Whether to run another round: rounds go on until `ROUNDS` of them have cut the operation,
/// and at most twice as many run (most kills must land inside the operation, or the test proves
/// little).
fn another_round(round: u64, killed: u64, what: &str) -> bool {
    assert!(
        round < 2 * ROUNDS || killed >= ROUNDS,
        "only {killed} of {round} {what} rounds cut the operation"
    );
    killed < ROUNDS
}

fn report(what: &str, rounds: u64, window: Duration, started: Instant) {
    eprintln!(
        "{what}: {ROUNDS} kills mid-operation in {rounds} rounds (window {} ms), {:.1} s in all",
        window.as_millis(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn kill_9_during_create_with_quantize() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    let mut d = daemon_on(&models);
    // The F16 tiny model (5 MB), quantized to Q4_0 on the way in.
    let digest = d.upload_blob(&models::tiny("tiny-llama-spm-e64-f16.gguf"));
    let req = json!({"model": "crash:q4", "files": {"m.gguf": digest}, "quantize": "q4_0", "stream": false});
    run_ok(&d, "/api/create", &req);
    let want = manifest_bytes(&models, "crash:q4");
    let window = median_of_3(|| {
        assert_eq!(delete(&d, "crash:q4"), 200);
        run_ok(&d, "/api/create", &req)
    });
    let (mut killed, mut round) = (0, 0);
    while another_round(round, killed, "create") {
        assert_eq!(delete(&d, "crash:q4"), 200);
        let when = format!("create round {round}");
        killed += u64::from(kill_round(
            &mut d,
            window,
            &[200],
            &when,
            post_json("/api/create", &req),
        ));
        // The model is there whole or not at all.
        let names = model_names(&d);
        assert!(names.is_empty() || names == ["crash:q4"], "{when}: {names:?}");
        run_ok(&d, "/api/create", &req);
        assert_doctor_clean(&models, &format!("{when}, after creating again"));
        // Same inputs, same model, byte for byte.
        assert_eq!(manifest_bytes(&models, "crash:q4"), want, "{when}");
        round += 1;
    }
    let show = d.post_ok("/api/show", &json!({"model": "crash:q4"}));
    assert_eq!(show["details"]["quantization_level"], "Q4_0", "{show}");
    let r = d.post_ok(
        "/api/generate",
        &json!({"model": "crash:q4", "prompt": "hi", "stream": false, "options": {"num_predict": 2}}),
    );
    assert_eq!(r["done"], true);
    d.kill_9();
    assert_repairable(&models);
    report("create", round, window, started);
}

/// A blocking client for the registry's own API.
fn registry_get(url: &str, accept: &str) -> (u16, Vec<u8>) {
    let r = ollamars_tests::daemon::http_client()
        .get(url)
        .header("Accept", accept)
        .send()
        .unwrap();
    (r.status().as_u16(), r.bytes().unwrap().to_vec())
}

#[test]
fn kill_9_during_push() {
    let started = Instant::now();
    let reg = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    let mut d = daemon_on(&models);
    d.create_model("tiny", &models::tiny("tiny-llama-spm-e256-q4_k_m.gguf"));
    let want = manifest_bytes(&models, "tiny");
    let layers: Vec<String> = serde_json::from_slice::<Value>(&want).unwrap()["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["digest"].as_str().unwrap().to_string())
        .collect();
    // Every round pushes to a new repository, so every push uploads every blob.
    let copy_to = |d: &Daemon, repo: &str| -> String {
        let name = format!("{}/test/{repo}:1", reg.host());
        let r = d.post("/api/copy", &json!({"source": "tiny", "destination": name}));
        assert_eq!(r.status(), 200);
        name
    };
    let push = |name: &str| json!({"model": name, "insecure": true, "stream": false});
    let mut n = 0;
    let window = median_of_3(|| {
        n += 1;
        run_ok(&d, "/api/push", &push(&copy_to(&d, &format!("calibrate{n}"))))
    });
    let (mut killed, mut round) = (0, 0);
    while another_round(round, killed, "push") {
        let repo = format!("crash{round}");
        let name = copy_to(&d, &repo);
        let when = format!("push round {round}");
        killed += u64::from(kill_round(
            &mut d,
            window,
            &[200],
            &when,
            post_json("/api/push", &push(&name)),
        ));
        let names = model_names(&d);
        assert!(
            names.contains(&name) && names.contains(&"tiny:latest".to_string()),
            "{when}: {names:?}"
        );
        run_ok(&d, "/api/push", &push(&name));
        assert_doctor_clean(&models, &format!("{when}, after pushing again"));
        // The registry holds the manifest, byte for byte, and every blob whole.
        let base = format!("http://{}/v2/test/{repo}", reg.host());
        let (status, got) = registry_get(
            &format!("{base}/manifests/1"),
            "application/vnd.docker.distribution.manifest.v2+json",
        );
        assert_eq!(status, 200, "{when}");
        assert_eq!(got, want, "{when}");
        for digest in &layers {
            let (status, blob) = registry_get(&format!("{base}/blobs/{digest}"), "*/*");
            assert_eq!(status, 200, "{when}: {digest}");
            assert_eq!(&sha256(&blob), digest, "{when}");
        }
        round += 1;
    }
    d.kill_9();
    assert_repairable(&models);
    report("push", round, window, started);
}

#[test]
fn kill_9_during_pull() {
    let started = Instant::now();
    let reg = Registry::start();
    let name = format!("{}/test/crash:1", reg.host());
    // Pushed once from another daemon.
    let src = Daemon::start();
    src.create_model("tiny", &models::tiny("tiny-llama-spm-e256-q4_k_m.gguf"));
    let r = src.post("/api/copy", &json!({"source": "tiny", "destination": name}));
    assert_eq!(r.status(), 200);
    let req = json!({"model": name, "insecure": true, "stream": false});
    run_ok(&src, "/api/push", &req);
    drop(src);

    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    let mut d = daemon_on(&models);
    run_ok(&d, "/api/pull", &req);
    let want = manifest_bytes(&models, &name);
    // Deletes the model and its blobs (with no daemon running, so no pull's pin keeps them),
    // so that the next pull downloads everything, on a fresh daemon.
    let forget = |d: &mut Daemon| {
        assert_eq!(delete(d, &name), 200);
        d.kill_9();
        for b in std::fs::read_dir(models.join("blobs")).unwrap().flatten() {
            std::fs::remove_file(b.path()).unwrap();
        }
        *d = daemon_on(&models);
    };
    let window = median_of_3(|| {
        forget(&mut d);
        run_ok(&d, "/api/pull", &req)
    });
    let (mut killed, mut round) = (0, 0);
    while another_round(round, killed, "pull") {
        forget(&mut d);
        let when = format!("pull round {round}");
        killed += u64::from(kill_round(
            &mut d,
            window,
            &[200],
            &when,
            post_json("/api/pull", &req),
        ));
        let names = model_names(&d);
        assert!(names.is_empty() || names == [name.clone()], "{when}: {names:?}");
        run_ok(&d, "/api/pull", &req);
        assert_doctor_clean(&models, &format!("{when}, after pulling again"));
        assert_eq!(manifest_bytes(&models, &name), want, "{when}");
        round += 1;
    }
    // The pulled model answers.
    let r = d.post_ok(
        "/api/generate",
        &json!({"model": name, "prompt": "hi", "stream": false, "options": {"num_predict": 2}}),
    );
    assert_eq!(r["done"], true);
    d.kill_9();
    assert_repairable(&models);
    report("pull", round, window, started);
}
