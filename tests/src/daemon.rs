//! A live daemon for end-to-end tests: the real `ollamars serve` binary on a free loopback port,
//! with a temporary models directory (`OLLAMARS_MODELS`) and a temporary config file, so nothing
//! of the user's setup leaks in. It is killed on drop; its log goes to a file in its temporary
//! directory ([`Daemon::log`]) and is printed when it fails to start.
//!
//! ```no_run
//! use ollamars_tests::{models, Daemon};
//! let d = Daemon::builder().env("OLLAMARS_NUM_PARALLEL", "2").start();
//! d.create_model("tiny", &models::tiny_llama());
//! let reply = d.post("/api/generate", &serde_json::json!({"model": "tiny", "prompt": "hi", "stream": false}));
//! assert_eq!(reply.status(), 200);
//! ```
//!
//! The binary is the workspace's own `ollamars`, built (if stale) with the same profile as the
//! running test, once per test process; `OLLAMARS_BIN` names another one instead.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use reqwest::blocking::{Client, Response};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

/// How long the daemon may take to answer `GET /` after it starts.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The `ollamars` binary the daemon runs.
pub fn ollamars_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("OLLAMARS_BIN").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        build_ollamars()
    })
    .clone()
}

/// Builds `ollamars` into the target directory of the running test binary
/// (`<target>/<profile>/deps/<test>`), with the same profile, and returns its path. Cargo does
/// nothing when it is up to date (as after `cargo build --workspace`).
fn build_ollamars() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary under <target>/<profile>/deps")
        .to_path_buf();
    let target_dir = profile_dir.parent().expect("a target directory").to_path_buf();
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_string();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(crate::models::repo_root())
        .args(["build", "--quiet", "-p", "ollamars", "--bin", "ollamars"])
        .env("CARGO_TARGET_DIR", &target_dir);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let out = cmd.output().expect("running cargo build for ollamars");
    assert!(
        out.status.success(),
        "building ollamars failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = profile_dir.join("ollamars");
    assert!(bin.exists(), "cargo built no {}", bin.display());
    bin
}

/// A port nobody listened on a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding a free port")
        .port()
}

/// The HTTP client tests use: no proxy from the environment, no overall timeout (streams may
/// be long; tests that need one set it per request).
pub fn http_client() -> Client {
    Client::builder()
        .no_proxy()
        .timeout(None)
        .build()
        .expect("an HTTP client")
}

/// Settings for a daemon before it starts.
#[derive(Default)]
pub struct DaemonBuilder {
    env: Vec<(String, String)>,
    config: String,
    models_dir: Option<PathBuf>,
    args: Vec<String>,
}

impl DaemonBuilder {
    /// Sets an environment variable of the daemon (e.g. `OLLAMARS_NUM_PARALLEL`). Every other
    /// `OLLAMARS_*` variable of the test's environment is removed, except `OLLAMARS_LOG`.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The YAML config file's text (default: empty, so only defaults and [`Self::env`] apply).
    pub fn config(mut self, yaml: &str) -> Self {
        self.config = yaml.into();
        self
    }

    /// Uses this models directory instead of a fresh temporary one (e.g. to restart a daemon on
    /// the same store).
    pub fn models_dir(mut self, dir: &Path) -> Self {
        self.models_dir = Some(dir.into());
        self
    }

    /// An extra argument after `serve`.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Starts the daemon and waits until `GET /` answers. Panics (with the daemon's log) if it
    /// does not.
    pub fn start(self) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("ollamars-e2e-")
            .tempdir()
            .expect("a temporary directory");
        let models = self
            .models_dir
            .clone()
            .unwrap_or_else(|| dir.path().join("models"));
        std::fs::create_dir_all(&models).expect("creating the models directory");
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, &self.config).expect("writing the config file");
        // A port can be taken between our probe and the daemon's bind: try a few.
        let mut last_err = String::new();
        for _ in 0..3 {
            let port = free_port();
            match self.spawn(dir.path(), &models, &config, port) {
                Ok(child) => {
                    return Daemon {
                        child: Some(child),
                        port,
                        models,
                        client: http_client(),
                        dir,
                    }
                }
                Err(e) => last_err = e,
            }
        }
        panic!("the daemon did not start: {last_err}");
    }

    fn spawn(&self, dir: &Path, models: &Path, config: &Path, port: u16) -> Result<Child, String> {
        let log_path = dir.join("daemon.log");
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(ollamars_bin());
        cmd.arg("serve").arg("--config").arg(config).args(&self.args);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("OLLAMARS_") && k != "OLLAMARS_LOG" {
                cmd.env_remove(&*k);
            }
        }
        cmd.env("OLLAMARS_HOST", format!("127.0.0.1:{port}"))
            .env("OLLAMARS_MODELS", models)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", ollamars_bin().display()))?;
        let client = Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "exited with {status}:\n{}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                ));
            }
            if let Ok(r) = client.get(format!("http://127.0.0.1:{port}/")).send() {
                if r.status().is_success() {
                    return Ok(child);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(format!(
            "no answer on port {port} within {START_TIMEOUT:?}:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        ))
    }
}

/// A running `ollamars serve`, killed (SIGKILL) on drop.
pub struct Daemon {
    child: Option<Child>,
    port: u16,
    models: PathBuf,
    client: Client,
    dir: tempfile::TempDir,
}

impl Daemon {
    /// A daemon with default settings.
    pub fn start() -> Daemon {
        DaemonBuilder::default().start()
    }

    pub fn builder() -> DaemonBuilder {
        DaemonBuilder::default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, the value for `OLLAMARS_HOST` of a client (CLI, Python).
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The models directory (`OLLAMARS_MODELS`).
    pub fn models_dir(&self) -> &Path {
        &self.models
    }

    /// A scratch directory that lives as long as the daemon.
    pub fn temp_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Everything the daemon has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// The shared HTTP client (no proxy, no timeout).
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn get(&self, path: &str) -> Response {
        self.client
            .get(self.url(path))
            .send()
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log()))
    }

    pub fn post(&self, path: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .json(body)
            .send()
            .unwrap_or_else(|e| panic!("POST {path}: {e}\n{}", self.log()))
    }

    /// `DELETE /api/delete` of `model`.
    pub fn delete_model(&self, model: &str) -> Response {
        self.client
            .delete(self.url("/api/delete"))
            .json(&json!({ "model": model }))
            .send()
            .unwrap_or_else(|e| panic!("DELETE {model}: {e}\n{}", self.log()))
    }

    /// POSTs `body`, asserts a 200, and returns the JSON reply.
    pub fn post_ok(&self, path: &str, body: &Value) -> Value {
        let r = self.post(path, body);
        let status = r.status();
        let text = r.text().unwrap_or_default();
        assert_eq!(status, 200, "POST {path} {body}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("POST {path}: {e}: {text:?}"))
    }

    /// Uploads a file as a blob (`HEAD`, then `POST /api/blobs/sha256:…` if missing) and
    /// returns its digest.
    pub fn upload_blob(&self, file: &Path) -> String {
        let digest = sha256_file(file);
        let url = self.url(&format!("/api/blobs/{digest}"));
        let head = self.client.head(&url).send().expect("HEAD blob");
        if head.status() == 200 {
            return digest;
        }
        let f = std::fs::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let r = self
            .client
            .post(&url)
            .body(reqwest::blocking::Body::from(f))
            .send()
            .expect("POST blob");
        let status = r.status();
        assert!(
            status == 201 || status == 200,
            "uploading {}: {status} {}",
            file.display(),
            r.text().unwrap_or_default()
        );
        digest
    }

    /// Creates model `name` from a GGUF file: uploads it, then `/api/create` with `files`.
    pub fn create_model(&self, name: &str, gguf: &Path) {
        self.create_model_with(name, gguf, json!({}));
    }

    /// As [`Self::create_model`], with more `/api/create` fields (`template`, `system`,
    /// `parameters`, `quantize`, ...) merged into the request.
    pub fn create_model_with(&self, name: &str, gguf: &Path, extra: Value) {
        let digest = self.upload_blob(gguf);
        let file = gguf
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model.gguf".into());
        let mut req = json!({"model": name, "files": {file: digest}, "stream": false});
        if let (Some(obj), Value::Object(more)) = (req.as_object_mut(), extra) {
            obj.extend(more);
        }
        let reply = self.post_ok("/api/create", &req);
        assert_eq!(reply["status"], "success", "creating {name}: {reply}");
    }

    /// Kills the daemon with SIGKILL (no shutdown: nothing flushed, no cleanup) and waits for
    /// it to be gone. Its temporary directory (and models directory) stay until drop.
    pub fn kill_9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill(); // SIGKILL on Unix
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits (up to `timeout`) for the daemon to exit; `None` if it did not.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        // std only sends SIGKILL; kill(1) sends SIGTERM without a libc binding.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `sha256:<hex>` of a file.
pub fn sha256_file(path: &Path) -> String {
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("reading a file to hash");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Waits until `cond` holds, for at most `secs` seconds.
pub fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The value of one sample (`name` with its labels, as rendered) in `/metrics` text, if the
/// series is there.
pub fn metric_sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map(|v| v.parse().unwrap())
}

/// Reads an NDJSON body: one JSON value per line, no blank lines (panics on either fault).
pub fn ndjson(resp: Response) -> Vec<Value> {
    let mut out = Vec::new();
    for line in BufReader::new(resp).lines() {
        let line = line.expect("reading the stream");
        assert!(!line.trim().is_empty(), "blank line in an NDJSON stream");
        out.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad NDJSON line {line:?}: {e}")));
    }
    out
}

/// Reads an SSE body into its `data:` payloads, in order (`[DONE]` included as text).
pub fn sse_data(resp: Response) -> Vec<String> {
    let mut out = Vec::new();
    for line in BufReader::new(resp).lines() {
        let line = line.expect("reading the stream");
        if let Some(d) = line.strip_prefix("data:") {
            out.push(d.trim_start().to_string());
        }
    }
    out
}
