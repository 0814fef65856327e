//! Who may call the API: API keys with read-only and admin scopes, the bind policy (no
//! unauthenticated server on a non-loopback address unless explicitly allowed), and admin
//! endpoints kept to loopback clients when no keys are set.
//!
//! Keys come from `OLLAMARS_API_KEYS` / `api_keys` (comma-separated) and from a keys file
//! (`OLLAMARS_API_KEYS_FILE` / `api_keys_file`, one per line, `#` comments). An entry is `KEY`
//! or `admin:KEY` (every endpoint) or `read:KEY` (inference, list, show, ps, version, metrics).
//! Clients send `Authorization: Bearer KEY`, as the `ollama` and `openai` clients do, or
//! `x-api-key: KEY`, as the `anthropic` clients do. Keys are
//! compared by their SHA-256 digests in constant time, over every configured key.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use sha2::{Digest as _, Sha256};

use crate::config::{Config, Listen};
use crate::error::ApiError;
use crate::server::AppState;

/// What a key may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Inference, list, show, ps, version, metrics.
    ReadOnly,
    /// Everything, including create, delete, copy, pull, push and blob upload.
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::ReadOnly => "read",
            Scope::Admin => "admin",
        }
    }
}

/// Shortest key accepted: shorter secrets can be guessed.
pub const MIN_KEY_LEN: usize = 16;

/// One configured API key. Only its digest is kept; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    digest: [u8; 32],
    pub scope: Scope,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({}, <redacted>)", self.scope.as_str())
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl ApiKey {
    /// Parses one entry: `KEY`, `admin:KEY` or `read:KEY`.
    pub fn parse(entry: &str) -> Result<ApiKey, String> {
        let entry = entry.trim();
        let (scope, secret) = match entry.split_once(':') {
            Some(("admin", k)) => (Scope::Admin, k),
            Some(("read" | "ro" | "readonly" | "read-only", k)) => (Scope::ReadOnly, k),
            _ => (Scope::Admin, entry),
        };
        if secret.len() < MIN_KEY_LEN {
            return Err(format!(
                "an API key must be at least {MIN_KEY_LEN} characters (got one of {})",
                secret.len()
            ));
        }
        if secret
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || !b.is_ascii())
        {
            return Err("an API key must be printable ASCII without spaces".into());
        }
        Ok(ApiKey {
            digest: sha256(secret.as_bytes()),
            scope,
        })
    }

    /// Entries separated by commas (the environment variable and the config file's string form).
    pub fn parse_list(s: &str) -> Result<Vec<ApiKey>, String> {
        s.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(ApiKey::parse)
            .collect()
    }

    /// A keys file: one entry per line; blank lines and `#` comments are skipped.
    pub fn parse_file(text: &str) -> Result<Vec<ApiKey>, String> {
        text.lines()
            .enumerate()
            .map(|(i, l)| (i, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
            .map(|(i, l)| ApiKey::parse(l).map_err(|e| format!("line {}: {e}", i + 1)))
            .collect()
    }
}

/// Byte-wise comparison whose time does not depend on where the inputs differ.
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// The scope of a presented key, checking every configured key (no early exit, so the time
/// taken says nothing about which key matched or how much of it).
pub fn key_scope(keys: &[ApiKey], presented: &str) -> Option<Scope> {
    let d = sha256(presented.as_bytes());
    let mut best = None;
    for k in keys {
        if ct_eq(&k.digest, &d) {
            best = best.max(Some(k.scope));
        }
    }
    best
}

/// The scope an endpoint needs.
pub fn required_scope(path: &str) -> Scope {
    const ADMIN: &[&str] = &[
        "/api/create",
        "/api/delete",
        "/api/copy",
        "/api/pull",
        "/api/push",
    ];
    if ADMIN.contains(&path.trim_end_matches('/')) || path.starts_with("/api/blobs/") {
        Scope::Admin
    } else {
        Scope::ReadOnly
    }
}

/// True if `host` (an IP address or a name) is a loopback address.
pub fn is_loopback_host(host: &str) -> bool {
    match host.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// The bind policy: without API keys, listening beyond loopback needs `allow_remote`, and then
/// we warn. Returns the warning to log, if any.
pub fn check_bind(config: &Config) -> Result<Option<String>, String> {
    let Listen::Tcp { host, .. } = &config.host else {
        return Ok(None);
    };
    if is_loopback_host(host) || !config.api_keys.is_empty() {
        return Ok(None);
    }
    if !config.allow_remote {
        return Err(format!(
            "refusing to listen on {} without API keys: anyone who can reach it could run, pull and \
             delete models. Set OLLAMARS_API_KEYS (or api_keys / api_keys_file in the config file), \
             or set OLLAMARS_ALLOW_REMOTE=1 (allow_remote: true) to serve unauthenticated anyway",
            config.host
        ));
    }
    Ok(Some(format!(
        "listening on {} WITHOUT authentication (allow_remote is set): anyone who can reach this \
         address can run models; model management stays loopback-only",
        config.host
    )))
}

/// Marks requests that arrived on a Unix socket (local by construction).
#[derive(Clone, Copy, Debug)]
pub struct UnixPeer;

/// True if the request came from this machine: a loopback TCP peer or the Unix socket. A
/// request without either marker is treated as remote.
fn peer_is_local(req: &Request) -> bool {
    if req.extensions().get::<UnixPeer>().is_some() {
        return true;
    }
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .is_some_and(|ConnectInfo(a)| {
            a.ip().is_loopback()
                || match a.ip() {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
                    IpAddr::V4(_) => false,
                }
        })
}

/// The key presented: the `Authorization: Bearer` token, else the `x-api-key` header.
fn presented_key(req: &Request) -> Option<&str> {
    let bearer = || {
        let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
    };
    bearer().or_else(|| req.headers().get("x-api-key")?.to_str().ok().map(str::trim))
}

/// An error in the shape the endpoint's clients expect (Anthropic's under `/v1/messages`,
/// OpenAI's under the rest of `/v1`).
pub fn reject(path: &str, status: StatusCode, message: String) -> Response {
    let e = ApiError::new(status, message);
    let mut resp = if path.starts_with("/v1/messages") {
        crate::anthropic::error_response(status, &e.message)
    } else if path.starts_with("/v1/") {
        let code = match status {
            StatusCode::UNAUTHORIZED => "invalid_api_key",
            _ => "insufficient_permissions",
        };
        let body = serde_json::json!({"error": {
            "message": e.message, "type": "invalid_request_error", "param": null, "code": code,
        }});
        crate::error::logged((status, axum::Json(body)).into_response(), &e.message)
    } else {
        e.into_response()
    };
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"ollamars\""),
        );
    }
    resp
}

/// The middleware: API keys when configured; otherwise admin endpoints for local clients only.
/// `GET`/`HEAD /` stays open: it is the liveness probe (clients' heartbeat, health checks) and
/// answers a constant string.
pub async fn authorize(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if path == "/" {
        return next.run(req).await;
    }
    let need = required_scope(&path);
    let keys = &st.config.api_keys;
    if keys.is_empty() {
        if need == Scope::Admin && !peer_is_local(&req) {
            return reject(
                &path,
                StatusCode::FORBIDDEN,
                format!(
                    "{path} is only available from this machine when no API keys are set; \
                     set OLLAMARS_API_KEYS with an admin key to manage models remotely"
                ),
            );
        }
        return next.run(req).await;
    }
    let Some(token) = presented_key(&req) else {
        return reject(
            &path,
            StatusCode::UNAUTHORIZED,
            "unauthorized: this server requires an API key; send `Authorization: Bearer <key>` \
             (OLLAMA_API_KEY for the ollama clients, OPENAI_API_KEY for openai's)"
                .into(),
        );
    };
    match key_scope(keys, token) {
        None => reject(
            &path,
            StatusCode::UNAUTHORIZED,
            "unauthorized: invalid API key".into(),
        ),
        Some(have) if have < need => reject(
            &path,
            StatusCode::FORBIDDEN,
            format!("forbidden: {path} needs an admin API key; this key is read-only"),
        ),
        Some(_) => next.run(req).await,
    }
}

// ---------------------------------------------------------------------------------------------
// Limits: what one request may cost the server.

/// Largest request head (request line and headers) hyper buffers; more gets 431.
pub const MAX_HEADER_BYTES: usize = 64 << 10;
/// Most header fields in one request.
pub const MAX_HEADERS: usize = 100;
/// Deepest JSON nesting accepted in a request body.
pub const MAX_JSON_DEPTH: usize = 64;

/// The deepest array/object nesting in a JSON text (strings skipped), stopping early once it
/// passes `max`.
pub fn json_depth(bytes: &[u8], max: usize) -> usize {
    let (mut depth, mut deepest, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > max {
                    return deepest;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Keys whose string values are prompt text (Ollama's and OpenAI's request bodies).
const TEXT_KEYS: &[&str] = &["prompt", "suffix", "system", "content", "input", "text"];

/// Prompt bytes and images in a request body.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Usage {
    pub text_bytes: usize,
    pub images: usize,
}

fn text_len(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(text_len).sum(),
        // OpenAI content parts: {"type": "text", "text": "..."}.
        Value::Object(o) => o.get("text").map_or(0, text_len),
        _ => 0,
    }
}

/// Adds up the prompt text and the images of a request, wherever they are nested
/// (`messages[].content`, `messages[].images`, OpenAI `image_url` parts, `input` arrays).
pub fn usage(v: &serde_json::Value) -> Usage {
    use serde_json::Value;
    let mut u = Usage::default();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(a) => stack.extend(a),
            Value::Object(o) => {
                if o.get("type").and_then(Value::as_str) == Some("image_url") {
                    u.images += 1;
                }
                for (k, v) in o {
                    if k == "images" {
                        u.images += v.as_array().map_or(1, Vec::len);
                    } else if TEXT_KEYS.contains(&k.as_str()) {
                        u.text_bytes += text_len(v);
                        // Content parts may also be images.
                        u.images += v.as_array().map_or(0, |parts| {
                            parts
                                .iter()
                                .filter(|p| p.get("type").and_then(Value::as_str) == Some("image_url"))
                                .count()
                        });
                    } else {
                        stack.push(v);
                    }
                }
            }
            _ => {}
        }
    }
    u
}

/// The limits a request body is held to.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub max_prompt_bytes: usize,
    pub max_images: usize,
}

impl BodyLimits {
    pub fn from_config(c: &Config) -> BodyLimits {
        BodyLimits {
            max_bytes: usize::try_from(c.max_request_bytes).unwrap_or(usize::MAX),
            max_prompt_bytes: usize::try_from(c.max_prompt_bytes).unwrap_or(usize::MAX),
            max_images: c.max_images,
        }
    }

    /// Checks a JSON body: nesting depth, prompt length, images. A body that is not JSON is
    /// left to the handler, which reports its own error.
    pub fn check_json(&self, body: &[u8]) -> Result<(), (StatusCode, String)> {
        if json_depth(body, MAX_JSON_DEPTH) > MAX_JSON_DEPTH {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("request JSON is nested deeper than {MAX_JSON_DEPTH} levels"),
            ));
        }
        let Ok(v) = crate::wire::from_json::<serde_json::Value>(body) else {
            return Ok(());
        };
        let u = usage(&v);
        if u.text_bytes > self.max_prompt_bytes {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "prompt too long: {} bytes of text, the limit is {} (max_prompt_bytes, OLLAMARS_MAX_PROMPT_BYTES)",
                    u.text_bytes, self.max_prompt_bytes
                ),
            ));
        }
        if u.images > self.max_images {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "too many images: {}, the limit is {} (max_images, OLLAMARS_MAX_IMAGES)",
                    u.images, self.max_images
                ),
            ));
        }
        Ok(())
    }
}

/// A body stream that fails when the client pauses longer than `idle` between chunks.
fn idle_timeout(body: Body, idle: Duration) -> Body {
    let stream = body.into_data_stream();
    Body::from_stream(futures_util::stream::unfold(stream, move |mut s| async move {
        match tokio::time::timeout(idle, s.next()).await {
            Ok(Some(chunk)) => Some((chunk.map_err(std::io::Error::other), s)),
            Ok(None) => None,
            Err(_) => Some((
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no data from the client for {}s", idle.as_secs()),
                )),
                s,
            )),
        }
    }))
}

/// The middleware: blob uploads may pause at most `read_timeout` between chunks (they may take
/// hours in total); every other body is read here, within `read_timeout` and
/// `max_request_bytes`, and checked before the handler sees it.
pub async fn limit(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if path.starts_with("/api/blobs/") {
        let idle = st.config.read_timeout;
        let req = req.map(|b| idle_timeout(b, idle));
        return next.run(req).await;
    }
    let limits = BodyLimits::from_config(&st.config);
    let too_large = || {
        reject(
            &path,
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body larger than {} bytes (max_request_bytes, OLLAMARS_MAX_REQUEST_BYTES)",
                limits.max_bytes
            ),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_bytes as u64) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let timeout = st.config.read_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => {
                return reject(
                    &path,
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "request body not received within {}s (read_timeout, OLLAMARS_READ_TIMEOUT)",
                        timeout.as_secs_f64()
                    ),
                )
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return reject(
                    &path,
                    StatusCode::BAD_REQUEST,
                    format!("reading the request body: {e}"),
                )
            }
            Ok(Some(Ok(chunk))) => {
                if buf.len() + chunk.len() > limits.max_bytes {
                    return too_large();
                }
                buf.extend_from_slice(&chunk);
            }
        }
    }
    if !buf.is_empty() {
        if let Err((status, msg)) = limits.check_json(&buf) {
            return reject(&path, status, msg);
        }
    }
    next.run(Request::from_parts(parts, Body::from(buf))).await
}

// ---------------------------------------------------------------------------------------------
// Error messages: no absolute path of the server's disk reaches a client.

/// Replaces every absolute filesystem path in a message by `…/` and its last component, so
/// errors still say which file without telling a client where the server keeps it. API routes
/// (`/api/…`, `/v1/…`) and URLs are left alone.
pub fn redact_paths(msg: &str) -> std::borrow::Cow<'_, str> {
    let bytes = msg.as_bytes();
    let is_start = |i: usize| {
        bytes[i] == b'/'
            && (i == 0
                || matches!(
                    bytes[i - 1],
                    b' ' | b'"' | b'\'' | b'(' | b'=' | b'`' | b'[' | b'\t' | b'\n'
                ))
    };
    let ends = |b: u8| {
        matches!(
            b,
            b' ' | b'"' | b'\'' | b')' | b'`' | b',' | b';' | b']' | b'\t' | b'\n'
        )
    };
    if !(0..bytes.len()).any(is_start) {
        return msg.into();
    }
    let mut out = String::with_capacity(msg.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        if !is_start(i) {
            i += 1;
            continue;
        }
        let end = (i..bytes.len()).find(|&j| ends(bytes[j])).unwrap_or(bytes.len());
        let token = &msg[i..end];
        // A trailing ':' ends a path in "path: error" messages.
        let token = token.strip_suffix(':').unwrap_or(token);
        let is_route = ["/api/", "/v1/", "/metrics"].iter().any(|r| token.starts_with(r));
        if token.matches('/').count() >= 2 && !is_route {
            let base = token.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            out.push_str(&msg[copied..i]);
            out.push_str("…/");
            out.push_str(base);
            copied = i + token.len();
        }
        i = end.max(i + 1);
    }
    out.push_str(&msg[copied..]);
    out.into()
}

// ---------------------------------------------------------------------------------------------
// Connections: hyper with a header read timeout and bounded request heads.

/// What a connection's peer is, put into every request's extensions.
pub trait PeerInfo: Send + Sync + 'static {
    fn insert_into(&self, ext: &mut axum::http::Extensions);
}

impl PeerInfo for SocketAddr {
    fn insert_into(&self, ext: &mut axum::http::Extensions) {
        ext.insert(ConnectInfo(*self));
    }
}

impl PeerInfo for tokio::net::unix::SocketAddr {
    fn insert_into(&self, ext: &mut axum::http::Extensions) {
        ext.insert(UnixPeer);
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then lets open connections finish
/// their requests. Unlike `axum::serve`, request heads must arrive within `header_timeout`
/// and fit in [`MAX_HEADER_BYTES`] (else the connection closes, or 431), so slow clients
/// cannot hold connections open indefinitely.
pub async fn serve_connections<L>(
    mut listener: L,
    app: axum::Router,
    header_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) where
    L: axum::serve::Listener,
    L::Addr: PeerInfo + Clone,
{
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let (close_tx, close_rx) = tokio::sync::watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            conn = listener.accept() => conn,
            _ = &mut shutdown => break,
        };
        let app = app.clone();
        let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let mut req = req.map(Body::new);
            peer.insert_into(req.extensions_mut());
            tower_service::Service::call(&mut app.clone(), req)
        });
        let mut close_rx = close_rx.clone();
        tokio::spawn(async move {
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(MAX_HEADER_BYTES)
                .max_headers(MAX_HEADERS);
            builder
                .http2()
                .timer(TokioTimer::new())
                .max_header_list_size(MAX_HEADER_BYTES as u32);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection closed: {e}");
                    }
                    return;
                }
                _ = close_rx.changed() => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    // Ask idle connections to close, and wait for the busy ones to finish.
    let _ = close_tx.send(());
    drop(close_rx);
    close_tx.closed().await;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use axum::http::Method;
    use tower::ServiceExt as _;

    /// A router over an empty store, configured by `env` (as `OLLAMARS_*` variables).
    pub(crate) fn app(env: &[(&str, &str)]) -> (axum::Router, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let cfg_path = dir.path().join("config.yaml");
        std::fs::write(&cfg_path, "").unwrap();
        let models = dir.path().join("models");
        let mut env: Vec<(String, String)> =
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        env.push(("OLLAMARS_MODELS".into(), models.display().to_string()));
        let config = Config::load_with(Some(&cfg_path), |k| {
            env.iter().find(|e| e.0 == k).map(|e| e.1.clone())
        })
        .unwrap();
        let sched = crate::scheduler::Scheduler::new(crate::scheduler::SchedulerConfig {
            keep_alive: config.keep_alive,
            num_parallel: 1,
            max_loaded_models: 1,
            max_queue: 4,
            max_memory: 1 << 30,
            kv_type: config.kv_cache_type,
            context_length: 256,
            num_threads: 1,
            step_tokens: 64,
        });
        let state = Arc::new(AppState {
            store: registry::Store::open(&models).unwrap(),
            client: registry::Client::new().unwrap(),
            sched,
            formats: Default::default(),
            listed: Default::default(),
            security: crate::server::Security::new(&config),
            config,
        });
        (crate::server::router(state), dir)
    }

    /// Sends a request from `peer` and returns the status and the body as JSON (or Null).
    pub(crate) async fn call(
        app: &axum::Router,
        peer: &str,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost:11434");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut req = b.body(Body::from(body.to_string())).unwrap();
        let addr: SocketAddr = peer.parse().unwrap();
        req.extensions_mut().insert(ConnectInfo(addr));
        let resp = app.clone().oneshot(req).await.unwrap();
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        let v = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (parts.status, parts.headers, v)
    }

    const LOCAL: &str = "127.0.0.1:50000";
    const REMOTE: &str = "192.0.2.7:50000";

    #[tokio::test]
    async fn without_keys_admin_endpoints_are_loopback_only() {
        let (app, _d) = app(&[]);
        let (s, _, v) = call(&app, REMOTE, Method::POST, "/api/copy", &[], "{}").await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        assert!(v["error"].as_str().unwrap().contains("OLLAMARS_API_KEYS"), "{v}");
        let (s, _, _) = call(&app, REMOTE, Method::HEAD, "/api/blobs/sha256:00", &[], "").await;
        assert_eq!(s, StatusCode::FORBIDDEN);
        // From loopback the request reaches the handler (which rejects the empty copy).
        let (s, _, _) = call(&app, LOCAL, Method::POST, "/api/copy", &[], "{}").await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        let (s, _, _) = call(&app, "[::ffff:127.0.0.1]:1", Method::POST, "/api/copy", &[], "{}").await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        // Read-only endpoints are open to every peer.
        let (s, _, v) = call(&app, REMOTE, Method::GET, "/api/version", &[], "").await;
        assert_eq!(s, StatusCode::OK);
        assert!(v["version"].is_string());
    }

    #[tokio::test]
    async fn keys_gate_every_endpoint_by_scope() {
        let keys = format!("admin:{K1},read:{K2}");
        let (app, _d) = app(&[("OLLAMARS_API_KEYS", &keys)]);
        let admin = format!("Bearer {K1}");
        let read = format!("Bearer {K2}");
        // No key: 401 in Ollama's shape on /api, OpenAI's on /v1, with a challenge.
        let (s, h, v) = call(&app, LOCAL, Method::GET, "/api/tags", &[], "").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert!(h.get(header::WWW_AUTHENTICATE).is_some());
        assert!(
            v["error"].as_str().unwrap().contains("Authorization: Bearer"),
            "{v}"
        );
        let (s, _, v) = call(&app, LOCAL, Method::GET, "/v1/models", &[], "").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert_eq!(v["error"]["code"], "invalid_api_key", "{v}");
        assert!(v["error"]["message"].is_string());
        // Loopback peers need a key too once keys are set.
        let (s, _, _) = call(&app, LOCAL, Method::GET, "/api/version", &[], "").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        // Except for the liveness probe.
        let (s, _, _) = call(&app, REMOTE, Method::GET, "/", &[], "").await;
        assert_eq!(s, StatusCode::OK);
        // A wrong key, a key of another scheme, a key one byte off.
        for bad in [
            "Bearer nope",
            "Basic abc",
            &format!("Bearer {K1}x"),
            &format!("Bearer {}", &K1[1..]),
        ] {
            let (s, _, _) = call(
                &app,
                LOCAL,
                Method::GET,
                "/api/tags",
                &[("authorization", bad)],
                "",
            )
            .await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{bad}");
        }
        // Read-only key: reads yes, admin no (403 naming the reason).
        let (s, _, _) = call(
            &app,
            REMOTE,
            Method::GET,
            "/api/tags",
            &[("authorization", &read)],
            "",
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        let (s, _, _) = call(
            &app,
            REMOTE,
            Method::GET,
            "/v1/models",
            &[("authorization", &read)],
            "",
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        for p in ["/api/pull", "/api/push", "/api/create", "/api/copy"] {
            let (s, _, v) = call(&app, LOCAL, Method::POST, p, &[("authorization", &read)], "{}").await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{p}");
            assert!(v["error"].as_str().unwrap().contains("read-only"), "{v}");
        }
        // Admin key: admin endpoints reachable from anywhere (the handler answers 400 here).
        let (s, _, _) = call(
            &app,
            REMOTE,
            Method::POST,
            "/api/copy",
            &[("authorization", &admin)],
            "{}",
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        // The scheme is case-insensitive, as RFC 9110 says.
        let lower = format!("bearer {K2}");
        let (s, _, _) = call(
            &app,
            LOCAL,
            Method::GET,
            "/api/tags",
            &[("authorization", &lower)],
            "",
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        // Anthropic's clients send the key as x-api-key, and get Anthropic's error shape.
        let (s, _, _) = call(&app, REMOTE, Method::GET, "/api/tags", &[("x-api-key", K2)], "").await;
        assert_eq!(s, StatusCode::OK);
        let (s, _, v) = call(
            &app,
            REMOTE,
            Method::POST,
            "/v1/messages",
            &[("x-api-key", "nope")],
            "{}",
        )
        .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    }

    #[tokio::test]
    async fn no_debug_or_profiling_endpoints() {
        let (app, _d) = app(&[]);
        for p in [
            "/debug/pprof/",
            "/debug/pprof/profile",
            "/debug/pprof/heap",
            "/debug/vars",
            "/debug",
            "/metrics/debug",
            "/api/debug",
            "/_internal",
        ] {
            let (s, _, _) = call(&app, LOCAL, Method::GET, p, &[], "").await;
            assert_eq!(s, StatusCode::NOT_FOUND, "{p}");
        }
    }

    #[tokio::test]
    async fn cors_preflight_needs_no_key() {
        let (app, _d) = app(&[("OLLAMARS_API_KEYS", K1)]);
        let (s, h, _) = call(
            &app,
            LOCAL,
            Method::OPTIONS,
            "/api/chat",
            &[
                ("origin", "http://localhost:3000"),
                ("access-control-request-method", "POST"),
            ],
            "",
        )
        .await;
        assert_eq!(s, StatusCode::NO_CONTENT);
        assert!(h[header::ACCESS_CONTROL_ALLOW_HEADERS]
            .to_str()
            .unwrap()
            .contains("Authorization"));
    }

    #[test]
    fn bind_policy() {
        let cfg = |env: &[(&str, &str)]| {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("c.yaml");
            std::fs::write(&p, "").unwrap();
            Config::load_with(Some(&p), |k| {
                env.iter().find(|e| e.0 == k).map(|e| e.1.to_string())
            })
            .unwrap()
        };
        assert_eq!(check_bind(&cfg(&[])), Ok(None));
        assert_eq!(check_bind(&cfg(&[("OLLAMARS_HOST", "[::1]:9")])), Ok(None));
        assert_eq!(
            check_bind(&cfg(&[("OLLAMARS_HOST", "unix:///tmp/x.sock")])),
            Ok(None)
        );
        let e = check_bind(&cfg(&[("OLLAMARS_HOST", "0.0.0.0")])).unwrap_err();
        assert!(
            e.contains("OLLAMARS_API_KEYS") && e.contains("OLLAMARS_ALLOW_REMOTE"),
            "{e}"
        );
        assert!(check_bind(&cfg(&[("OLLAMARS_HOST", "example.com:1")])).is_err());
        let w = check_bind(&cfg(&[
            ("OLLAMARS_HOST", "0.0.0.0"),
            ("OLLAMARS_ALLOW_REMOTE", "1"),
        ]));
        assert!(w.unwrap().unwrap().contains("WITHOUT authentication"));
        let keyed = cfg(&[("OLLAMARS_HOST", "0.0.0.0"), ("OLLAMARS_API_KEYS", K1)]);
        assert_eq!(check_bind(&keyed), Ok(None));
    }

    const K1: &str = "sk-admin-0123456789abcdef";
    const K2: &str = "sk-read-0123456789abcdef";

    #[test]
    fn parses_entries_and_scopes() {
        let keys = ApiKey::parse_list(&format!(" {K1} , read:{K2},")).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(key_scope(&keys, K1), Some(Scope::Admin));
        assert_eq!(key_scope(&keys, K2), Some(Scope::ReadOnly));
        assert_eq!(key_scope(&keys, "sk-admin-0123456789abcdeX"), None);
        assert_eq!(key_scope(&keys, ""), None);
        assert_eq!(key_scope(&[], K1), None);
        // The same secret listed twice takes the larger scope.
        let both = ApiKey::parse_list(&format!("read:{K1},admin:{K1}")).unwrap();
        assert_eq!(key_scope(&both, K1), Some(Scope::Admin));
        assert!(ApiKey::parse("short").unwrap_err().contains("at least 16"));
        assert!(ApiKey::parse("read:has space in the key").is_err());
        assert!(!format!("{keys:?}").contains("0123456789"));
    }

    #[test]
    fn keys_file() {
        let text = format!("# keys\n\n{K1}\nread:{K2}\n");
        assert_eq!(ApiKey::parse_file(&text).unwrap().len(), 2);
        let e = ApiKey::parse_file("# c\nread:tiny\n").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
    }

    #[test]
    fn scopes_of_endpoints() {
        for p in [
            "/api/create",
            "/api/delete",
            "/api/copy",
            "/api/pull",
            "/api/push",
            "/api/blobs/sha256:00",
        ] {
            assert_eq!(required_scope(p), Scope::Admin, "{p}");
        }
        for p in [
            "/",
            "/api/generate",
            "/api/chat",
            "/api/embed",
            "/api/tags",
            "/api/show",
            "/api/ps",
            "/api/version",
            "/v1/chat/completions",
            "/v1/models",
            "/metrics",
        ] {
            assert_eq!(required_scope(p), Scope::ReadOnly, "{p}");
        }
    }

    #[test]
    fn loopback_hosts() {
        for h in ["127.0.0.1", "::1", "[::1]", "localhost", "127.1.2.3"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["0.0.0.0", "::", "192.168.1.2", "example.com"] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn json_depth_and_usage() {
        assert_eq!(json_depth(br#"{"a":[1,{"b":"[[[["}]}"#, 64), 3);
        assert_eq!(json_depth(br#""\"[[[""#, 64), 0);
        let deep = "[".repeat(100_000);
        assert_eq!(json_depth(deep.as_bytes(), 64), 65);
        let v = serde_json::json!({
            "model": "m", "prompt": "hello", "system": "sys",
            "images": ["a", "b"],
            "messages": [
                {"role": "user", "content": "four", "images": ["c"]},
                {"role": "user", "content": [
                    {"type": "text", "text": "abc"},
                    {"type": "image_url", "image_url": {"url": "data:..."}}
                ]}
            ],
            "input": ["xx", "yy"],
            "options": {"stop": ["zzzzzzzz"]}
        });
        assert_eq!(
            usage(&v),
            Usage {
                text_bytes: 5 + 3 + 4 + 3 + 4,
                images: 4
            }
        );
    }

    #[test]
    fn check_json_limits() {
        let l = BodyLimits {
            max_bytes: 1 << 20,
            max_prompt_bytes: 10,
            max_images: 2,
        };
        assert!(l.check_json(br#"{"prompt":"0123456789"}"#).is_ok());
        let (s, m) = l.check_json(br#"{"prompt":"0123456789x"}"#).unwrap_err();
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(m.contains("OLLAMARS_MAX_PROMPT_BYTES"), "{m}");
        // A lone surrogate, which the handler reads as U+FFFD, does not get a body past the
        // limits.
        let (s, _) = l.check_json(br#"{"prompt":"0123456789x\ud83d"}"#).unwrap_err();
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        let (s, m) = l.check_json(br#"{"images":["a","b","c"]}"#).unwrap_err();
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(m.contains("too many images"), "{m}");
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(
            l.check_json(deep.as_bytes()).unwrap_err().0,
            StatusCode::BAD_REQUEST
        );
        // Not JSON: the handler reports it.
        assert!(l.check_json(b"not json").is_ok());
    }

    #[test]
    fn paths_are_redacted() {
        let r = |s: &str| redact_paths(s).into_owned();
        assert_eq!(
            r("open /home/alice/.ollamars/models/blobs/sha256-ab: No such file"),
            "open …/sha256-ab: No such file"
        );
        assert_eq!(
            r("bad file \"/var/lib/x/model.gguf\""),
            "bad file \"…/model.gguf\""
        );
        assert_eq!(r("(/tmp/a/b) and /etc/passwd"), "(…/b) and …/passwd");
        // Routes, URLs, relative paths and single-component words stay.
        for keep in [
            "POST /api/blobs/sha256:00 first",
            "see https://example.com/a/b/c",
            "blobs/sha256-00 missing",
            "a/b/c",
            "ratio 3/4",
            "/ alone",
            "/single",
        ] {
            assert_eq!(r(keep), keep);
        }
        assert_eq!(
            ApiError::internal("reading /root/models/manifests/x/y: denied").message,
            "reading …/y: denied"
        );
    }

    #[tokio::test]
    async fn limits_reject_before_the_handler() {
        let (app, _d) = app(&[
            ("OLLAMARS_MAX_REQUEST_BYTES", "4096"),
            ("OLLAMARS_MAX_PROMPT_BYTES", "100"),
            ("OLLAMARS_MAX_IMAGES", "1"),
        ]);
        let big = format!("{{\"model\":\"m\",\"prompt\":\"{}\"}}", "x".repeat(5000));
        let (s, _, v) = call(&app, LOCAL, Method::POST, "/api/generate", &[], &big).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(v["error"].as_str().unwrap().contains("max_request_bytes"), "{v}");
        let long = format!("{{\"model\":\"m\",\"prompt\":\"{}\"}}", "x".repeat(101));
        let (s, _, v) = call(&app, LOCAL, Method::POST, "/api/generate", &[], &long).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(v["error"].as_str().unwrap().contains("prompt too long"), "{v}");
        let imgs = r#"{"model":"m","messages":[{"role":"user","content":"hi","images":["a","b"]}]}"#;
        let (s, _, _) = call(&app, LOCAL, Method::POST, "/api/chat", &[], imgs).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        let deep = format!("{{\"model\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        let (s, _, v) = call(&app, LOCAL, Method::POST, "/v1/chat/completions", &[], &deep).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(
            v["error"]["message"].as_str().unwrap().contains("nested deeper"),
            "{v}"
        );
        // Within the limits the handler answers (here: no such model).
        let ok = r#"{"model":"missing","prompt":"hi"}"#;
        let (s, _, _) = call(&app, LOCAL, Method::POST, "/api/generate", &[], ok).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn a_stalled_body_times_out() {
        let (app, _d) = app(&[("OLLAMARS_READ_TIMEOUT", "0.3s")]);
        for path in [
            "/api/generate",
            "/api/blobs/sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            // One chunk, then nothing, without ending the body.
            let stream = futures_util::stream::once(async {
                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"{\"model\""))
            })
            .chain(futures_util::stream::pending());
            let mut req = Request::builder()
                .method(Method::POST)
                .uri(path)
                .header(header::HOST, "localhost")
                .body(Body::from_stream(stream))
                .unwrap();
            req.extensions_mut()
                .insert(ConnectInfo(LOCAL.parse::<SocketAddr>().unwrap()));
            let t0 = std::time::Instant::now();
            let resp = tokio::time::timeout(Duration::from_secs(20), app.clone().oneshot(req))
                .await
                .expect("the server waited forever for the body")
                .unwrap();
            // A JSON body gets 408; the blob handler reports the failed upload its own way.
            assert!(!resp.status().is_success(), "{path}: {}", resp.status());
            if path == "/api/generate" {
                assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
            }
            assert!(t0.elapsed() < Duration::from_secs(10));
        }
    }
}
