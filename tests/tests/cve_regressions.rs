//! Regression tests for the classes of vulnerability Ollama has shipped, each against a live
//! `ollamars serve`. A test's name says which CVE (or class) it covers:
//!
//! - CVE-2024-28224: DNS rebinding reached the unauthenticated API (Host and Origin checks).
//! - CVE-2024-37032: a `../` digest wrote and read files outside the store.
//! - CVE-2024-39719 / CVE-2024-39722: error messages disclosed which server files exist.
//! - CVE-2024-39720 / CVE-2024-39721: malformed input crashed or hung the server.
//! - CVE-2026-7482: a GGUF with tensors past its end was read out of bounds (and pushed).
//! - CVE-2026-7020: a download path stored blobs without checking their digest.
//! - Unauthenticated exposure (the many public Ollama servers): API keys, bind policy.
//! - Denial of service by slow or oversized requests (slowloris, huge heads, deep JSON).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ollamars_tests::daemon::ollamars_bin;
use ollamars_tests::registry::Registry;
use ollamars_tests::{models, Daemon};
use serde_json::{json, Value};

const ADMIN_KEY: &str = "sk-admin-regression-0123456789";
const READ_KEY: &str = "sk-read-regression-0123456789";

/// Sends raw bytes and returns what the server answered before closing (or within `wait`).
fn raw(d: &Daemon, request: &[u8], wait: Duration) -> (String, Duration) {
    let mut s = TcpStream::connect(("127.0.0.1", d.port())).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s.write_all(request).unwrap();
    let t0 = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), t0.elapsed())
}

fn status_line(resp: &str) -> &str {
    resp.lines().next().unwrap_or("")
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn cve_2024_28224_dns_rebinding_host_header_rejected() {
    let d = Daemon::start();
    for host in ["evil.example", "evil.example:11434", "localhost.evil.example"] {
        let (resp, _) = raw(
            &d,
            format!("GET /api/tags HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
            Duration::from_secs(10),
        );
        assert!(status_line(&resp).contains(" 403 "), "{host}: {resp}");
        assert!(resp.contains("DNS rebinding"), "{resp}");
    }
    let port = d.port();
    for host in [
        "localhost".to_string(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        let (resp, _) = raw(
            &d,
            format!("GET /api/tags HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
            Duration::from_secs(10),
        );
        assert!(status_line(&resp).contains(" 200 "), "{host}: {resp}");
    }
}

#[test]
fn cve_2024_28224_dns_rebinding_foreign_origin_rejected_naming_the_setting() {
    let d = Daemon::builder()
        .env("OLLAMARS_ORIGINS", "https://chat.example.com")
        .start();
    let r = d
        .client()
        .get(d.url("/api/tags"))
        .header("Origin", "https://evil.example")
        .send()
        .unwrap();
    assert_eq!(r.status(), 403);
    let msg = r.json::<Value>().unwrap()["error"].as_str().unwrap().to_string();
    assert!(
        msg.contains("https://evil.example") && msg.contains("OLLAMARS_ORIGINS"),
        "{msg}"
    );
    for ok in [
        "https://chat.example.com",
        "http://localhost:3000",
        "vscode-webview://x",
    ] {
        let r = d
            .client()
            .get(d.url("/api/tags"))
            .header("Origin", ok)
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{ok}");
        assert_eq!(r.headers()["access-control-allow-origin"], ok);
    }
}

#[test]
fn cve_2024_37032_traversal_digest_in_blob_upload_rejected() {
    let d = Daemon::start();
    let outside = d.temp_dir().join("pwned");
    for digest in [
        "sha256:..%2F..%2Fpwned",
        "sha256-..%2F..%2F..%2Fpwned",
        "..%2F..%2Fpwned",
        "sha256:%2E%2E%2F%2E%2E%2Fpwned",
        "sha256:0000000000000000000000000000000000000000000000000000000000000000%2F..%2F..%2Fpwned",
    ] {
        let r = d
            .client()
            .post(d.url(&format!("/api/blobs/{digest}")))
            .body("owned")
            .send()
            .unwrap();
        assert!(r.status() == 400 || r.status() == 404, "{digest}: {}", r.status());
        let r = d
            .client()
            .head(d.url(&format!("/api/blobs/{digest}")))
            .send()
            .unwrap();
        assert!(r.status().is_client_error(), "{digest}: {}", r.status());
    }
    assert!(!outside.exists(), "a blob upload wrote outside the store");
    for f in files_under(d.models_dir()) {
        assert!(
            !std::fs::read(&f).unwrap_or_default().starts_with(b"owned"),
            "{}",
            f.display()
        );
    }
}

#[test]
fn cve_2024_37032_traversal_digest_and_names_in_create_pull_show_rejected() {
    let d = Daemon::start();
    let r = d.post(
        "/api/create",
        &json!({"model": "x", "files": {"model.gguf": "sha256:../../../../etc/passwd"}}),
    );
    assert_eq!(r.status(), 400, "{:?}", r.text());
    for name in ["../../etc/passwd", "..%2f..%2fetc", "a/../../b", "/etc/passwd"] {
        for path in ["/api/show", "/api/pull", "/api/delete"] {
            let r = if path == "/api/delete" {
                d.delete_model(name)
            } else {
                d.post(path, &json!({"model": name, "stream": false}))
            };
            assert!(
                r.status() == 400 || r.status() == 404,
                "{path} {name}: {}",
                r.status()
            );
        }
    }
    assert!(files_under(&d.models_dir().join("manifests")).is_empty());
}

#[test]
fn cve_2024_39719_errors_do_not_disclose_server_paths() {
    let d = Daemon::start();
    let secrets = [
        d.models_dir().display().to_string(),
        d.temp_dir().display().to_string(),
    ];
    let probes = [
        ("/api/create", json!({"model": "x", "from": "/etc/shadow"})),
        (
            "/api/create",
            json!({"model": "x", "from": "/nonexistent/dir/model.gguf"}),
        ),
        (
            "/api/create",
            json!({"model": "x", "files": {"m.gguf": format!("sha256:{}", "0".repeat(64))}}),
        ),
        ("/api/show", json!({"model": "missing"})),
        ("/api/generate", json!({"model": "missing", "prompt": "hi"})),
        ("/api/push", json!({"model": "missing", "stream": false})),
    ];
    for (path, body) in probes {
        let r = d.post(path, &body);
        let text = r.text().unwrap();
        for s in &secrets {
            assert!(!text.contains(s.as_str()), "{path} leaked {s}: {text}");
        }
        assert!(
            !text.contains("/etc/") && !text.contains("/nonexistent/"),
            "{path}: {text}"
        );
        // A FROM path the client did not find is named as such.
        if body["from"].is_string() {
            assert!(text.contains("FROM names a file path"), "{text}");
        }
    }
}

#[test]
fn cve_2024_39720_truncated_gguf_in_create_is_a_clean_error() {
    let d = Daemon::start();
    let full = std::fs::read(models::tiny_llama()).unwrap();
    let cut = d.temp_dir().join("cut.gguf");
    std::fs::write(&cut, &full[..full.len().min(300)]).unwrap();
    let digest = d.upload_blob(&cut);
    let r = d.post(
        "/api/create",
        &json!({"model": "cut", "files": {"cut.gguf": digest}, "stream": false}),
    );
    assert!(r.status().is_client_error(), "{}", r.status());
    // The server is still serving.
    assert_eq!(d.get("/api/version").status(), 200);
}

/// CVE-2026-7482: a GGUF whose tensors reach past the end of the file made the quantizer read
/// out of bounds, and push sent what it read. Here the header is whole and the tensor data is cut
/// short: create (with or without quantize) refuses it, so there is no model to push.
#[test]
fn cve_2026_7482_gguf_tensors_past_the_end_refused_by_create_and_quantize() {
    let d = Daemon::start();
    let full = std::fs::read(models::tiny("tiny-llama-spm-e64-f16.gguf")).unwrap();
    let header_len = engine::gguf::parse(&full).unwrap().data_offset as usize;
    // The header and most of the tensor data: the last tensors end beyond the file.
    let cut_at = header_len + (full.len() - header_len) * 3 / 4;
    let cut = d.temp_dir().join("short.gguf");
    std::fs::write(&cut, &full[..cut_at]).unwrap();
    let digest = d.upload_blob(&cut);
    for extra in [
        json!({}),
        json!({"quantize": "q4_0"}),
        json!({"quantize": "q8_0"}),
    ] {
        let mut req = json!({"model": "short", "files": {"short.gguf": digest}, "stream": false});
        req.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let r = d.post("/api/create", &req);
        let status = r.status();
        let body: Value = r.json().unwrap();
        assert!(status.is_client_error(), "{extra}: {status} {body}");
        let err = body["error"].as_str().unwrap_or_default();
        assert!(
            err.contains("extends past the end of the file"),
            "{extra}: {body}"
        );
    }
    let tags: Value = d.get("/api/tags").json().unwrap();
    assert_eq!(tags["models"], json!([]), "{tags}");
    let r = d.post(
        "/api/push",
        &json!({"model": "short", "insecure": true, "stream": false}),
    );
    assert!(r.status().is_client_error(), "{}", r.status());
    assert_eq!(d.get("/api/version").status(), 200);
}

/// CVE-2026-7020: a second download path forgot to check the digest. A registry that serves a
/// blob with one byte changed (same size) fails the pull with a digest mismatch, whatever path the
/// download takes, and nothing of it is stored or listed.
#[test]
fn cve_2026_7020_pulled_blob_with_wrong_bytes_is_a_digest_mismatch() {
    let reg = Registry::start();
    let name = format!("{}/test/tampered:1", reg.host());
    let src = Daemon::start();
    src.create_model("tiny", &models::tiny_llama());
    let r = src.post("/api/copy", &json!({"source": "tiny", "destination": name}));
    assert_eq!(r.status(), 200);
    let r = src.post_ok(
        "/api/push",
        &json!({"model": name, "insecure": true, "stream": false}),
    );
    assert_eq!(r["status"], "success", "{r}");
    // The model layer, as the registry stores it: flip one byte in its middle.
    let stored = registry::Store::open(src.models_dir())
        .unwrap()
        .read_manifest(&registry::Name::parse(&name).unwrap())
        .unwrap();
    let manifest: Value = serde_json::from_slice(&stored.bytes).unwrap();
    let layer = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|l| l["size"].as_u64().unwrap())
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let hex = layer.strip_prefix("sha256:").unwrap();
    let stored = reg.data_dir().join(format!(
        "docker/registry/v2/blobs/sha256/{}/{hex}/data",
        &hex[..2]
    ));
    let mut bytes = std::fs::read(&stored).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&stored, &bytes).unwrap();

    let d = Daemon::start();
    for stream in [false, true] {
        let r = d.post(
            "/api/pull",
            &json!({"model": name, "insecure": true, "stream": stream}),
        );
        let text = r.text().unwrap();
        assert!(text.contains("digest mismatch"), "stream {stream}: {text}");
        assert!(!text.contains("\"success\""), "stream {stream}: {text}");
        let tags: Value = d.get("/api/tags").json().unwrap();
        assert_eq!(tags["models"], json!([]), "{tags}");
        assert!(
            !d.models_dir()
                .join("blobs")
                .join(layer.replace(':', "-"))
                .exists(),
            "the tampered blob was stored under its digest"
        );
        assert!(
            files_under(&d.models_dir().join("manifests")).is_empty(),
            "a manifest was written"
        );
    }
}

#[test]
fn unauthenticated_exposure_api_keys_required_on_every_endpoint() {
    let keys = format!("{ADMIN_KEY},read:{READ_KEY}");
    let d = Daemon::builder().env("OLLAMARS_API_KEYS", &keys).start();
    let c = d.client();
    let read = format!("Bearer {READ_KEY}");
    let admin = format!("Bearer {ADMIN_KEY}");
    for (method, path) in [
        ("GET", "/api/tags"),
        ("GET", "/api/version"),
        ("GET", "/api/ps"),
        ("POST", "/api/generate"),
        ("POST", "/api/chat"),
        ("POST", "/api/embed"),
        ("POST", "/api/show"),
        ("POST", "/api/pull"),
        ("POST", "/api/create"),
        ("DELETE", "/api/delete"),
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/metrics"),
    ] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = c.request(m.clone(), d.url(path)).json(&json!({})).send().unwrap();
        assert_eq!(r.status(), 401, "{method} {path}");
        let v: Value = r.json().unwrap();
        let msg = if path.starts_with("/v1/") {
            v["error"]["message"].as_str()
        } else {
            v["error"].as_str()
        };
        assert!(msg.is_some_and(|m| m.contains("API key")), "{path}: {v}");
        let r = c
            .request(m, d.url(path))
            .header("Authorization", "Bearer sk-admin-regression-0123456788")
            .json(&json!({}))
            .send()
            .unwrap();
        assert_eq!(r.status(), 401, "near-miss key on {path}");
    }
    let r = c
        .get(d.url("/api/tags"))
        .header("Authorization", &read)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .post(d.url("/api/pull"))
        .header("Authorization", &read)
        .json(&json!({"model": "x"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 403);
    // The admin key reaches the handler (which rejects an empty copy as a bad request).
    let r = c
        .post(d.url("/api/copy"))
        .header("Authorization", &admin)
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[test]
fn unauthenticated_exposure_public_bind_refused_without_keys() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, "").unwrap();
    let run = |extra: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(ollamars_bin());
        cmd.arg("serve").arg("--config").arg(&cfg);
        for (k, _) in std::env::vars() {
            if k.starts_with("OLLAMARS_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("OLLAMARS_HOST", "0.0.0.0:0")
            .env("OLLAMARS_MODELS", dir.path().join("models"));
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd
    };
    let out = run(&[]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to listen") && err.contains("OLLAMARS_API_KEYS"),
        "{err}"
    );
    // With an explicit opt-in it starts (and warns); stop it at once.
    let mut child = run(&[("OLLAMARS_ALLOW_REMOTE", "1")])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let t0 = Instant::now();
    let mut log = Vec::new();
    let mut buf = [0u8; 1024];
    while t0.elapsed() < Duration::from_secs(30) && !String::from_utf8_lossy(&log).contains("listening") {
        match stderr.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => log.extend_from_slice(&buf[..n]),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = String::from_utf8_lossy(&log);
    assert!(
        log.contains("WITHOUT authentication") && log.contains("listening"),
        "{log}"
    );
}

#[test]
fn dos_slowloris_request_head_times_out() {
    let d = Daemon::builder().env("OLLAMARS_READ_TIMEOUT", "1s").start();
    // Half a request head, then silence: the server must hang up, not wait forever.
    let (resp, took) = raw(
        &d,
        b"GET /api/tags HTTP/1.1\r\nHost: localhost\r\nX-Slow: 1\r\n",
        Duration::from_secs(20),
    );
    assert!(took < Duration::from_secs(10), "held open for {took:?}");
    assert!(resp.is_empty() || status_line(&resp).contains(" 408 "), "{resp}");
    // A JSON body that stalls gets 408 too.
    let (resp, took) = raw(
        &d,
        b"POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\"",
        Duration::from_secs(20),
    );
    assert!(took < Duration::from_secs(10), "held open for {took:?}");
    assert!(status_line(&resp).contains(" 408 "), "{resp}");
}

#[test]
fn dos_oversized_head_body_and_nesting_rejected() {
    let d = Daemon::builder()
        .env("OLLAMARS_MAX_REQUEST_BYTES", "1MiB")
        .start();
    let big_header = format!(
        "GET /api/tags HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(100 << 10)
    );
    let (resp, _) = raw(&d, big_header.as_bytes(), Duration::from_secs(10));
    assert!(
        resp.is_empty() || status_line(&resp).contains(" 431 "),
        "{}",
        status_line(&resp)
    );
    // A body over the limit is refused on its declared length, before it is read. Only the head
    // and a little of the body are sent: a client still writing 2 MiB when the server answers
    // and closes may see a reset instead of the 413 (that race is HTTP's, not the limit's).
    let over = format!(
        "POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{{\"model\":\"m\",\"prompt\":\"xxxx",
        2 << 20
    );
    let (resp, _) = raw(&d, over.as_bytes(), Duration::from_secs(10));
    assert!(status_line(&resp).contains(" 413 "), "{}", status_line(&resp));
    let deep = format!("{{\"model\":{}1{}}}", "[".repeat(10_000), "]".repeat(10_000));
    let r = d
        .client()
        .post(d.url("/api/chat"))
        .header("content-type", "application/json")
        .body(deep)
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(d.get("/api/version").status(), 200);
}
