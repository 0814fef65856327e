//! Test harness: a real registry (Debian's `docker-registry`, distribution 2.8) on loopback, with
//! or without token auth (a tiny token server signs JWTs with a throwaway RSA key via `openssl`),
//! TCP proxies that count and throttle, tiny GGUF files, and the small real models.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use engine::gguf::{GgufWriter, Value};
use engine::quant::GgmlType;
use registry::{Progress, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The `docker-registry` binary; the test suite installs it (scripts/test.sh), so a missing one
/// is a failure, not a skip.
fn registry_binary() -> PathBuf {
    for p in ["/usr/bin/docker-registry", "/usr/local/bin/docker-registry"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "docker-registry is not installed: run `apt-get install -y docker-registry` (scripts/test.sh does)"
    );
}

/// A running distribution registry on 127.0.0.1, killed on drop.
pub struct RegistryServer {
    child: Child,
    pub port: u16,
    /// The registry's config and storage, removed on drop.
    _dir: tempfile::TempDir,
    _token: Option<TokenServer>,
}

impl RegistryServer {
    pub fn start() -> RegistryServer {
        Self::start_with(false)
    }

    /// With `token_auth`, every request needs a bearer token from a token server started here.
    pub fn start_with(token_auth: bool) -> RegistryServer {
        Self::start_in(&std::env::temp_dir(), token_auth)
    }

    /// A registry whose storage and config live in a new temp dir under `parent`.
    ///
    /// `free_port` only finds a port that was free a moment ago: before the registry binds it,
    /// another test's server or an outgoing connection may take it. So each registry answers
    /// with a header of its own, ready means that *this* registry answered, and one that could
    /// not bind its port is started again on another.
    pub fn start_in(parent: &Path, token_auth: bool) -> RegistryServer {
        let dir = tempfile::tempdir_in(parent).unwrap();
        let token = token_auth.then(|| TokenServer::start(dir.path()));
        let auth = match &token {
            Some(t) => format!(
                "auth:\n  token:\n    realm: http://127.0.0.1:{}/token\n    service: test-registry\n    issuer: test-issuer\n    rootcertbundle: {}\n",
                t.port,
                t.cert.display()
            ),
            None => String::new(),
        };
        let marker = format!("{:016x}", rand_u64());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port();
            let config = format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  headers:\n    X-Test-Registry: [\"{marker}\"]\n{auth}",
                dir.path().join("data").display()
            );
            let config_path = dir.path().join("config.yml");
            std::fs::write(&config_path, config).unwrap();
            let log_path = dir.path().join("registry.log");
            let log = std::fs::File::create(&log_path).unwrap();
            let mut child = Command::new(registry_binary())
                .arg("serve")
                .arg(&config_path)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("starting docker-registry");
            match wait_ready(&mut child, port, &marker) {
                Ok(()) => {
                    return RegistryServer {
                        child,
                        port,
                        _dir: dir,
                        _token: token,
                    }
                }
                Err(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    assert!(
                        attempt < 5,
                        "docker-registry did not start on port {port}: {why}\n{log}"
                    );
                    eprintln!("docker-registry did not start on port {port} ({why}); trying another port");
                }
            }
        }
    }

    /// The registry's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Tokens the token server has issued (0 without token auth).
    pub fn tokens_issued(&self) -> u64 {
        self._token
            .as_ref()
            .map_or(0, |t| t.issued.load(Ordering::Relaxed))
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// Waits until the registry `child` answers on `port` with its `marker` header. An error if it
/// exits (say, its port was taken), if another server answers there, or after a minute.
fn wait_ready(child: &mut Child, port: u16, marker: &str) -> Result<(), String> {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Err(format!("it exited ({status})"));
        }
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut resp = Vec::new();
            let answered = s
                .write_all(b"GET /v2/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                .and_then(|()| s.read_to_end(&mut resp));
            let head = String::from_utf8_lossy(&resp).to_ascii_lowercase();
            if head.contains(&format!("x-test-registry: {marker}")) {
                return Ok(());
            }
            if answered.is_ok() && head.starts_with("http/") {
                return Err("another server answers on its port".into());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("no answer within a minute".into())
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A token server for distribution's token auth: issues RS256 JWTs (x5c chain = a self-signed
/// certificate the registry trusts) granting what each scope asks for.
pub struct TokenServer {
    pub port: u16,
    cert: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub issued: Arc<AtomicU64>,
}

impl TokenServer {
    fn start(dir: &Path) -> TokenServer {
        let key = dir.join("token.key");
        let cert = dir.join("token.crt");
        let ok = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=token",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(Stdio::null())
            .status()
            .expect("openssl is needed for the token-auth tests")
            .success();
        assert!(ok, "openssl could not make a key");
        let der = Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&cert)
            .output()
            .unwrap()
            .stdout;
        let x5c = b64(&der, false);
        // Bound here, on a port the kernel picks, so no other server can take it meanwhile.
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let issued = Arc::new(AtomicU64::new(0));
        let issued2 = issued.clone();
        let app = axum::Router::new().route(
            "/token",
            axum::routing::get(move |q: axum::extract::RawQuery| {
                let key = key.clone();
                let x5c = x5c.clone();
                let issued = issued2.clone();
                async move {
                    issued.fetch_add(1, Ordering::Relaxed);
                    let token = tokio::task::spawn_blocking(move || {
                        sign_token(&key, &x5c, q.0.as_deref().unwrap_or(""))
                    })
                    .await
                    .unwrap();
                    axum::Json(serde_json::json!({ "token": token }))
                }
            }),
        );
        // The server runs on its own thread and runtime, so it serves whatever runtime (if any)
        // the test uses.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).unwrap();
                ready_tx.send(()).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await
                    .unwrap();
            });
        });
        ready_rx.recv().unwrap();
        TokenServer {
            port,
            cert,
            stop: Some(stop_tx),
            thread: Some(thread),
            issued,
        }
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn sign_token(key: &Path, x5c: &str, query: &str) -> String {
    let mut access = Vec::new();
    for (k, v) in url_pairs(query) {
        if k != "scope" {
            continue;
        }
        // repository:<name>:<actions>
        let mut parts = v.splitn(3, ':');
        let (Some(ty), Some(name), Some(actions)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        access.push(serde_json::json!({
            "type": ty, "name": name, "actions": actions.split(',').collect::<Vec<_>>()
        }));
    }
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "x5c": [x5c]});
    let claims = serde_json::json!({
        "iss": "test-issuer", "sub": "anonymous", "aud": "test-registry",
        "exp": now + 3600, "nbf": now - 60, "iat": now,
        "jti": format!("{now}-{}", rand_u64()), "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes(), true),
        b64(claims.to_string().as_bytes(), true)
    );
    let mut child = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(signing_input.as_bytes())
        .unwrap();
    let sig = child.wait_with_output().unwrap().stdout;
    format!("{signing_input}.{}", b64(&sig, true))
}

fn url_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (unescape(k), unescape(v)))
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?'));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn b64(data: &[u8], url: bool) -> String {
    let table: &[u8; 64] = if url {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..=c.len() {
            out.push(table[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
        if !url {
            for _ in c.len()..3 {
                out.push('=');
            }
        }
    }
    out
}

pub fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

/// Deterministic pseudo-random bytes (xorshift), so blobs do not compress or repeat.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
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

/// A small valid GGUF (llama architecture, F16 file type), `n` tensors of 64x`rows` f32.
pub fn tiny_gguf(path: &Path, rows: u64, extra: &[(&str, Value)]) {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.set("general.name", Value::String("tiny".into()));
    w.set("general.file_type", Value::U32(1));
    w.set("llama.block_count", Value::U32(1));
    w.set("llama.context_length", Value::U32(128));
    for (k, v) in extra {
        w.set(*k, v.clone());
    }
    for i in 0..3 {
        w.add_tensor(format!("blk.0.t{i}.weight"), GgmlType::F32, &[64, rows])
            .unwrap();
    }
    w.write_file(path, |i, spec| {
        let n = spec.size as usize;
        Ok(std::borrow::Cow::Owned(random_bytes(n, i as u64 + 7)))
    })
    .unwrap();
}

/// A small valid F32 GGUF (llama architecture) with finite weights, for quantizing: 3 tensors of
/// 64x`rows` values in [-1, 1).
pub fn float_gguf(path: &Path, rows: u64) {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.set("general.file_type", Value::U32(0));
    w.set("llama.block_count", Value::U32(1));
    w.set("llama.context_length", Value::U32(128));
    for i in 0..3 {
        w.add_tensor(format!("blk.0.t{i}.weight"), GgmlType::F32, &[64, rows])
            .unwrap();
    }
    w.write_file(path, |i, spec| {
        let bytes = random_bytes(spec.size as usize, i as u64 + 11);
        let floats: Vec<u8> = bytes
            .chunks_exact(4)
            .flat_map(|c| {
                let u = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                (u as f32 / 2_147_483_648.0 - 1.0).to_le_bytes()
            })
            .collect();
        Ok(std::borrow::Cow::Owned(floats))
    })
    .unwrap();
}

/// Writes a split GGUF set (`prefix-0000k-of-0000n.gguf`) with the given tensors spread over
/// `parts` files, and returns the paths.
pub fn split_gguf(dir: &Path, prefix: &str, parts: u64) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let tensors_per_part = 2u64;
    for p in 0..parts {
        let mut w = GgufWriter::new();
        if p == 0 {
            w.set("general.architecture", Value::String("llama".into()));
            w.set("general.file_type", Value::U32(0));
            w.set("llama.block_count", Value::U32(1));
        }
        w.set("split.no", Value::U16(p as u16));
        w.set("split.count", Value::U16(parts as u16));
        w.set(
            "split.tensors.count",
            Value::I32((parts * tensors_per_part) as i32),
        );
        for t in 0..tensors_per_part {
            w.add_tensor(format!("blk.{p}.t{t}.weight"), GgmlType::F32, &[32, 8])
                .unwrap();
        }
        let path = engine::gguf::split_path(&dir.join(prefix), p, parts);
        w.write_file(&path, |i, spec| {
            Ok(std::borrow::Cow::Owned(random_bytes(
                spec.size as usize,
                p * 10 + i as u64,
            )))
        })
        .unwrap();
        paths.push(path);
    }
    paths
}

/// The Gemma 3 270M GGUF: `$OLLAMARS_TEST_GEMMA`, else fetched with scripts/fetch-model.sh.
pub fn gemma() -> PathBuf {
    if let Some(p) = std::env::var_os("OLLAMARS_TEST_GEMMA") {
        return PathBuf::from(p);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-model.sh");
    let out = Command::new(script)
        .arg("gemma3-270m")
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/fetch-model.sh");
    assert!(out.status.success(), "fetch-model.sh failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A fresh store in a temp dir.
pub fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("models")).unwrap();
    (dir, store)
}

/// Collects progress events.
#[derive(Clone, Debug, Default)]
pub struct Events(pub Arc<Mutex<Vec<Progress>>>);

impl Events {
    pub fn push(&self, p: Progress) {
        self.0.lock().unwrap().push(p);
    }
    pub fn statuses(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in self.0.lock().unwrap().iter() {
            let s = p.status();
            if out.last() != Some(&s) {
                out.push(s);
            }
        }
        out
    }
    pub fn all(&self) -> Vec<Progress> {
        self.0.lock().unwrap().clone()
    }
}

/// A TCP proxy to `target`: counts bytes sent each way, optionally limiting what goes to the
/// client to `rate` bytes per second per connection.
pub struct Proxy {
    pub port: u16,
    pub to_client: Arc<AtomicU64>,
    pub to_server: Arc<AtomicU64>,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr, rate: Option<u64>) -> Proxy {
        Proxy::start_rates(target, rate, None).await
    }

    /// Like [`Proxy::start`], also limiting what goes to the server to `up_rate` bytes per second
    /// per connection.
    pub async fn start_rates(target: SocketAddr, rate: Option<u64>, up_rate: Option<u64>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let to_client = Arc::new(AtomicU64::new(0));
        let to_server = Arc::new(AtomicU64::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let (counter, up_counter, accepted2) = (to_client.clone(), to_server.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                accepted2.fetch_add(1, Ordering::Relaxed);
                let counter = counter.clone();
                let up_counter = up_counter.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 << 10];
                        let (start, mut sent) = (Instant::now(), 0u64);
                        while let Ok(n @ 1..) = cr.read(&mut buf).await {
                            if sw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                            up_counter.fetch_add(n as u64, Ordering::Relaxed);
                            sent += n as u64;
                            if let Some(rate) = up_rate {
                                let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                                if let Some(wait) = due.checked_sub(start.elapsed()) {
                                    tokio::time::sleep(wait).await;
                                }
                            }
                        }
                        let _ = sw.shutdown().await;
                    });
                    let mut buf = vec![0u8; 16 << 10];
                    let start = Instant::now();
                    let mut sent = 0u64;
                    loop {
                        let n = match sr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        counter.fetch_add(n as u64, Ordering::Relaxed);
                        sent += n as u64;
                        if let Some(rate) = rate {
                            let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                            if let Some(wait) = due.checked_sub(start.elapsed()) {
                                tokio::time::sleep(wait).await;
                            }
                        }
                    }
                    let _ = cw.shutdown().await;
                    up.abort();
                });
            }
        });
        Proxy {
            port,
            to_client,
            to_server,
            accepted,
            task,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.to_client.load(Ordering::Relaxed)
    }

    pub fn bytes_up(&self) -> u64 {
        self.to_server.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every file under `dir`, relative, sorted.
pub fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The harness itself: a registry is only ready when *it* answers on its port.
#[test]
fn wait_ready_tells_our_registry_from_another_server_on_its_port() {
    use std::io::{Read, Write};
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let foreign = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = [0u8; 1024];
        let _ = s.read(&mut req).unwrap();
        s.write_all(b"HTTP/1.0 200 OK\r\nX-Test-Registry: someone-else\r\n\r\n{}")
            .unwrap();
    });
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let got = wait_ready(&mut child, port, "ours");
    let _ = child.kill();
    let _ = child.wait();
    foreign.join().unwrap();
    assert_eq!(got, Err("another server answers on its port".to_string()));

    // A registry that exits (its port was taken) is not waited for.
    let mut child = Command::new("true").spawn().unwrap();
    let got = wait_ready(&mut child, free_port(), "ours");
    assert!(got.unwrap_err().contains("exited"));
}
