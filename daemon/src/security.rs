//! Who may call the API: API keys with read-only and admin scopes, the bind policy (no
//! unauthenticated server on a non-loopback address unless explicitly allowed), and admin
//! endpoints kept to loopback clients when no keys are set.
//!
//! Keys come from `OLLAMARS_API_KEYS` / `api_keys` (comma-separated) and from a keys file
//! (`OLLAMARS_API_KEYS_FILE` / `api_keys_file`, one per line, `#` comments). An entry is `KEY`
//! or `admin:KEY` (every endpoint) or `read:KEY` (inference, list, show, ps, version, metrics).
//! Clients send `Authorization: Bearer KEY`, as the `ollama` and `openai` clients do. Keys are
//! compared by their SHA-256 digests in constant time, over every configured key.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
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

/// The `Authorization: Bearer` token, if any.
fn bearer(req: &Request) -> Option<&str> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

/// An error in the shape the endpoint's clients expect (OpenAI's under `/v1`).
pub fn reject(path: &str, status: StatusCode, message: String) -> Response {
    let e = ApiError::new(status, message);
    let mut resp = if path.starts_with("/v1/") {
        let code = match status {
            StatusCode::UNAUTHORIZED => "invalid_api_key",
            _ => "insufficient_permissions",
        };
        let body = serde_json::json!({"error": {
            "message": e.message, "type": "invalid_request_error", "param": null, "code": code,
        }});
        (status, axum::Json(body)).into_response()
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
pub async fn authorize(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
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
    let Some(token) = bearer(&req) else {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use axum::body::Body;
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
        let (s, _, _) = call(&app, LOCAL, Method::GET, "/", &[], "").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
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
}
