//! The HTTP server: routes, the middleware every request passes (request id and log line,
//! Host-header check, CORS, body limits), listening on TCP or a Unix socket, and shutdown on
//! SIGTERM/SIGINT (in-flight requests get a grace period, then are cancelled; every model is
//! unloaded before the process exits).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, head, post};
use axum::Router;
use tracing::Instrument;

use crate::config::{Config, Listen};
use crate::error::ErrorMessage;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::{anthropic, api, metrics, models, openai, responses, security};

/// What every handler shares.
pub struct AppState {
    pub store: registry::Store,
    pub client: registry::Client,
    pub sched: Arc<Scheduler>,
    pub formats: crate::formats::Formats,
    pub listed: crate::models::ListedCapabilities,
    pub config: Config,
    pub security: Security,
}

/// The request checks that depend on where the server listens (issue 9 extends these: API keys,
/// admin scopes, further limits).
pub struct Security {
    /// Check the Host header against DNS rebinding (listening on loopback).
    pub check_host: bool,
    /// Allowed CORS origins, `*` wildcards allowed.
    pub origins: Vec<String>,
}

/// Origins always allowed (Ollama's defaults).
fn default_origins() -> Vec<String> {
    let mut o = Vec::new();
    for host in ["localhost", "127.0.0.1", "0.0.0.0"] {
        for scheme in ["http", "https"] {
            o.push(format!("{scheme}://{host}"));
            o.push(format!("{scheme}://{host}:*"));
        }
    }
    o.extend(
        [
            "app://*",
            "file://*",
            "tauri://*",
            "vscode-webview://*",
            "vscode-file://*",
        ]
        .map(String::from),
    );
    o
}

fn wildcard_match(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern.eq_ignore_ascii_case(s);
    }
    let s_l = s.to_ascii_lowercase();
    let mut rest = s_l.as_str();
    for (i, p) in parts.iter().enumerate() {
        let p = p.to_ascii_lowercase();
        if i == 0 {
            let Some(r) = rest.strip_prefix(p.as_str()) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(p.as_str());
        } else {
            match rest.find(p.as_str()) {
                Some(at) => rest = &rest[at + p.len()..],
                None => return false,
            }
        }
    }
    true
}

impl Security {
    pub fn new(config: &Config) -> Security {
        let check_host = match &config.host {
            Listen::Tcp { host, .. } => match host.parse::<IpAddr>() {
                Ok(ip) => ip.is_loopback(),
                Err(_) => host.eq_ignore_ascii_case("localhost"),
            },
            Listen::Unix(_) => false,
        };
        let mut origins = config.origins.clone();
        origins.extend(default_origins());
        Security { check_host, origins }
    }

    pub fn origin_allowed(&self, origin: &str) -> bool {
        self.origins.iter().any(|p| wildcard_match(p, origin))
    }

    /// Ollama's `allowedHost`: a request to a loopback listener must name a local host.
    pub fn host_allowed(&self, host: &str) -> bool {
        if !self.check_host {
            return true;
        }
        let host = host.trim().to_ascii_lowercase();
        let name = if let Some(r) = host.strip_prefix('[') {
            r.split(']').next().unwrap_or("").to_string()
        } else if host.matches(':').count() == 1 {
            host.split(':').next().unwrap_or("").to_string()
        } else {
            host.clone()
        };
        if name.is_empty() || name == "localhost" {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            return ip.is_loopback()
                || ip.is_unspecified()
                || match ip {
                    IpAddr::V4(v4) => v4.is_private() || v4.is_link_local(),
                    IpAddr::V6(v6) => (v6.segments()[0] & 0xfe00) == 0xfc00,
                };
        }
        if hostname().is_some_and(|h| h.eq_ignore_ascii_case(&name)) {
            return true;
        }
        [".localhost", ".local", ".internal"]
            .iter()
            .any(|t| name.ends_with(t))
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

const ALLOW_HEADERS: &str =
    "Authorization, Content-Type, User-Agent, Accept, X-Requested-With, OpenAI-Beta, \
x-api-key, anthropic-version, anthropic-beta, anthropic-dangerous-direct-browser-access, \
x-stainless-arch, x-stainless-async, x-stainless-custom-poll-interval, x-stainless-helper-method, \
x-stainless-lang, x-stainless-os, x-stainless-package-version, x-stainless-poll-helper, \
x-stainless-retry-count, x-stainless-runtime, x-stainless-runtime-version, x-stainless-timeout";

/// Host check and CORS.
async fn guard(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !st.security.host_allowed(&host) {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({"error": format!(
                "host {host:?} is not allowed: this server listens on loopback and accepts only local host names (DNS rebinding protection)"
            )})),
        )
            .into_response();
    }
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string);
    let Some(origin) = origin else {
        return next.run(req).await;
    };
    if !st.security.origin_allowed(&origin) {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({"error": format!(
                "origin {origin:?} is not allowed; add it to OLLAMARS_ORIGINS (or `origins` in the config file), e.g. OLLAMARS_ORIGINS={origin}"
            )})),
        )
            .into_response();
    }
    let preflight = req.method() == Method::OPTIONS;
    let mut resp = if preflight {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    if preflight {
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("43200"));
    }
    resp
}

static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

/// Gives each request an id (`x-request-id`), a tracing span, and a log line when it is answered.
async fn trace(req: Request, next: Next) -> Response {
    let id = format!("{:08x}", REQUEST_IDS.fetch_add(1, Ordering::Relaxed));
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let span = tracing::info_span!("request", id = %id, %method, path = %path);
    let t0 = Instant::now();
    let mut resp = next.run(req).instrument(span.clone()).await;
    span.in_scope(|| {
        let (status, latency_ms) = (resp.status().as_u16(), t0.elapsed().as_millis() as u64);
        match resp.extensions().get::<ErrorMessage>() {
            Some(ErrorMessage(error)) => tracing::info!(status, latency_ms, error, "answered"),
            None => tracing::info!(status, latency_ms, "answered"),
        }
    });
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// A path no route takes, answered as Ollama's router (gin) answers it. (gin also redirects a
/// trailing slash away when the path without it is a route; axum cannot say which paths are.)
async fn no_route() -> Response {
    (StatusCode::NOT_FOUND, "404 page not found").into_response()
}

pub fn router(state: Arc<AppState>) -> Router {
    let limit = usize::try_from(state.config.max_request_bytes).unwrap_or(usize::MAX);
    let blobs = Router::new()
        .route(
            "/api/blobs/{digest}",
            head(models::head_blob).post(models::create_blob),
        )
        .layer(DefaultBodyLimit::disable());
    Router::new()
        .route("/", get(models::root).head(models::root))
        .route("/api/version", get(models::version).head(models::version))
        .route("/api/generate", post(api::generate))
        .route("/api/chat", post(api::chat))
        .route("/api/embed", post(api::embed))
        .route("/api/embeddings", post(api::embeddings))
        .route("/api/tags", get(models::tags).head(models::tags))
        .route("/api/show", post(models::show))
        .route("/api/copy", post(models::copy))
        .route("/api/delete", axum::routing::delete(models::delete))
        .route("/api/pull", post(models::pull))
        .route("/api/push", post(models::push))
        .route("/api/create", post(models::create))
        .route("/api/ps", get(models::ps))
        .route("/api/me", post(models::no_accounts))
        .route("/api/signout", post(models::no_accounts))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/embeddings", post(openai::embeddings))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/models", get(models::openai_models))
        .route("/v1/models/{*model}", get(models::openai_model))
        .route("/metrics", get(metrics::handler))
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(limit))
        .merge(blobs)
        .layer(middleware::from_fn_with_state(state.clone(), security::limit))
        .layer(middleware::from_fn_with_state(state.clone(), security::authorize))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(middleware::from_fn(metrics::count_requests))
        .layer(middleware::from_fn(trace))
        .with_state(state)
}

/// How long in-flight requests may run after a shutdown signal before they are cancelled.
const GRACE: Duration = Duration::from_secs(5);

/// Runs the server until SIGTERM or SIGINT.
pub async fn serve(config: Config) -> Result<(), String> {
    if let Some(warning) = security::check_bind(&config)? {
        tracing::warn!("{warning}");
    }
    for name in &config.ollama_env {
        let ours = name.replacen("OLLAMA_", "OLLAMARS_", 1);
        tracing::warn!("{name} is set but not read: ollamars's setting is {ours} (`ollamars serve --print-config` shows the settings in effect)");
    }
    let store = registry::Store::open(&config.models).map_err(|e| e.to_string())?;
    let client = registry::Client::new().map_err(|e| e.to_string())?;
    let sched = Scheduler::new(SchedulerConfig {
        keep_alive: config.keep_alive,
        num_parallel: config.num_parallel,
        max_loaded_models: config.max_loaded_models,
        max_queue: config.max_queue,
        max_memory: config.max_memory,
        kv_type: config.kv_cache_type,
        context_length: config.context_length,
        num_threads: config.num_threads,
        step_tokens: 512,
    });
    let security = Security::new(&config);
    let listen = config.host.clone();
    let read_timeout = config.read_timeout;
    let state = Arc::new(AppState {
        store,
        client,
        sched: sched.clone(),
        formats: Default::default(),
        listed: Default::default(),
        config,
        security,
    });
    let app = router(state);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let signals = {
        let sched = sched.clone();
        async move {
            wait_for_signal().await;
            tracing::info!("shutting down: finishing in-flight requests");
            sched.stop_taking();
            let _ = stop_tx.send(true);
            // In-flight requests get a grace period, then are cancelled.
            tokio::spawn(async move {
                tokio::time::sleep(GRACE).await;
                tracing::info!("grace period over: cancelling in-flight requests");
                sched.shutdown(true).await;
            });
        }
    };
    tokio::spawn(signals);
    let shutdown = {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    match &listen {
        Listen::Tcp { host, port } => {
            let addr = if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            tracing::info!(address = %listener.local_addr().map(|a| a.to_string()).unwrap_or(addr), version = env!("CARGO_PKG_VERSION"), "listening");
            security::serve_connections(listener, app, read_timeout, shutdown).await;
        }
        Listen::Unix(path) => {
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                use std::os::unix::fs::FileTypeExt;
                if meta.file_type().is_socket() {
                    let _ = std::fs::remove_file(path);
                } else {
                    return Err(format!("{} exists and is not a socket", path.display()));
                }
            }
            let listener = tokio::net::UnixListener::bind(path)
                .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
            tracing::info!(socket = %path.display(), version = env!("CARGO_PKG_VERSION"), "listening");
            security::serve_connections(listener, app, read_timeout, shutdown).await;
            let _ = std::fs::remove_file(path);
        }
    }
    sched.shutdown(false).await;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec(check_host: bool, extra: &[&str]) -> Security {
        let mut origins: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        origins.extend(default_origins());
        Security { check_host, origins }
    }

    #[test]
    fn origins() {
        let s = sec(true, &["https://*.example.com", "chrome-extension://*"]);
        assert!(s.origin_allowed("http://localhost"));
        assert!(s.origin_allowed("http://localhost:3000"));
        assert!(s.origin_allowed("https://127.0.0.1:8443"));
        assert!(s.origin_allowed("vscode-webview://abc"));
        assert!(s.origin_allowed("https://app.example.com"));
        assert!(s.origin_allowed("chrome-extension://abcdef"));
        assert!(!s.origin_allowed("https://evil.com"));
        assert!(!s.origin_allowed("http://localhost.evil.com"));
        assert!(!sec(true, &[]).origin_allowed("chrome-extension://abcdef"));
    }

    #[test]
    fn hosts() {
        let s = sec(true, &[]);
        for ok in [
            "localhost:11434",
            "127.0.0.1:11434",
            "[::1]:11434",
            "10.0.0.5",
            "foo.localhost",
            "box.local",
            "",
        ] {
            assert!(s.host_allowed(ok), "{ok}");
        }
        for bad in ["evil.com", "evil.com:11434", "8.8.8.8", "localhost.evil.com"] {
            assert!(!s.host_allowed(bad), "{bad}");
        }
        assert!(sec(false, &[]).host_allowed("evil.com"));
    }
}
