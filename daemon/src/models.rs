//! Model management and status endpoints: `/api/tags`, `/api/show`, `/api/copy`,
//! `/api/delete`, `/api/pull`, `/api/push`, `/api/create`, `/api/blobs/:digest`, `/api/ps`,
//! `/api/version` and `/`. The work is the registry crate's; this module speaks the wire.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{stream, StreamExt, TryStreamExt};
use registry::{Capability, Digest, Name, Progress};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::server::AppState;
use crate::util::{lock, rfc3339};
use crate::wire::parse_body;

fn into_response(r: ApiResult<Response>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

/// The Ollama release whose API this daemon follows. Clients compare `/api/version` with the
/// Ollama release that brought what they use (VS Code's Copilot, Raycast's extension and
/// Continue refuse older servers), so it reports this, and ollamars' own version beside it.
pub const OLLAMA_API_VERSION: &str = "0.33.0";

/// Clients probing for a server compare the text (Ollama's words).
pub async fn root() -> &'static str {
    "Ollama is running"
}

pub async fn version() -> Response {
    axum::Json(json!({ "version": OLLAMA_API_VERSION, "ollamars_version": env!("CARGO_PKG_VERSION") }))
        .into_response()
}

fn details_json(d: &registry::Details) -> Value {
    json!({
        "parent_model": d.parent_model,
        "format": d.format,
        "family": d.family,
        "families": d.families,
        "parameter_size": d.parameter_size,
        "quantization_level": d.quantization_level,
    })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> registry::Result<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(ApiError::from)
}

/// `/api/tags`' capabilities by manifest digest: a manifest fixes them, and working them out
/// reads the weights' header, too slow to repeat on every listing (clients poll it). Holds the
/// last listing's models only.
#[derive(Default)]
pub struct ListedCapabilities(Mutex<HashMap<Digest, Vec<Capability>>>);

pub async fn tags(State(st): State<Arc<AppState>>) -> Response {
    into_response(
        async {
            let store = st.store.clone();
            let known = lock(&st.listed.0).clone();
            let (list, caps) = blocking(move || {
                let list = store.list()?;
                // A model whose capabilities cannot be worked out (a missing blob, say) is listed
                // without them, and tried again next time.
                let caps: HashMap<Digest, Vec<Capability>> = list
                    .iter()
                    .filter_map(|m| {
                        let c = known.get(&m.digest).cloned();
                        let c = c.or_else(|| registry::capabilities(&store, &m.name).ok())?;
                        Some((m.digest, c))
                    })
                    .collect();
                Ok((list, caps))
            })
            .await?;
            let models: Vec<Value> = list
                .iter()
                .map(|m| {
                    let name = m.name.display_shortest();
                    let details = registry::Details::from_config(&m.config, m.parent_model.as_deref());
                    let mut v = json!({
                        "name": name,
                        "model": name,
                        "modified_at": rfc3339(m.modified),
                        "size": m.size,
                        "digest": m.digest.hex(),
                        "details": details_json(&details),
                    });
                    // Ollama leaves the field out when empty.
                    if let Some(c) = caps.get(&m.digest).filter(|c| !c.is_empty()) {
                        v["capabilities"] = c.iter().map(|c| c.as_str()).collect();
                    }
                    v
                })
                .collect();
            *lock(&st.listed.0) = caps;
            Ok(axum::Json(json!({ "models": models })).into_response())
        }
        .await,
    )
}

/// `/api/me` and `/api/signout`: Ollama's ollama.com account endpoints, which its CLI calls
/// before `push` to an ollama.com name and for `signin`/`signout`. ollamars has no accounts, so
/// they say so (the CLI prints the error) instead of a bare 404.
pub async fn no_accounts() -> Response {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "ollamars does not sign in to ollama.com: pulling needs no account, and models are pushed to a registry named in the model name (host/namespace/model)",
    )
    .into_response()
}

/// A body's model name: `model`, or the legacy `name`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct NameBody {
    model: Option<String>,
    name: Option<String>,
    verbose: Option<bool>,
    system: Option<String>,
    insecure: Option<bool>,
    stream: Option<bool>,
}

impl NameBody {
    fn name(&self) -> ApiResult<String> {
        self.model
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| self.name.clone().filter(|s| !s.is_empty()))
            .ok_or_else(|| ApiError::bad_request("model is required"))
    }
}

fn parse_name(s: &str) -> ApiResult<Name> {
    Name::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))
}

pub async fn show(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    into_response(
        async {
            let req: NameBody = parse_body(&body)?;
            let requested = req.name()?;
            let name = parse_name(&requested)?;
            let verbose = req.verbose.unwrap_or(false);
            let store = st.store.clone();
            let info = blocking(move || registry::show(&store, &name, verbose))
                .await
                .map_err(|e| not_found_as(e, &requested))?;
            let mut v = json!({
                "license": info.license_text,
                "modelfile": info.modelfile,
                "parameters": info.parameters_text,
                // Without either, requests use the fallback, as Ollama's default template.
                "template": info.model.template.clone().or(info.chat_template.clone())
                    .unwrap_or_else(|| engine::template::FALLBACK_TEMPLATE.to_string()),
                // An empty `system` (the Go CLI always sends the field) keeps the model's.
                "system": req.system.clone().filter(|s| !s.is_empty())
                    .or(info.model.system.clone()).unwrap_or_default(),
                "details": details_json(&info.details),
                "model_info": Value::Object(info.model_info.clone()),
                "capabilities": info.capabilities.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                "modified_at": rfc3339(info.modified),
            });
            let o = v.as_object_mut().expect("object");
            if !info.model.messages.is_empty() {
                o.insert(
                    "messages".into(),
                    json!(info
                        .model
                        .messages
                        .iter()
                        .map(|m| json!({"role": m.role, "content": m.content}))
                        .collect::<Vec<_>>()),
                );
            }
            if let Some(p) = &info.projector_info {
                o.insert("projector_info".into(), Value::Object(p.clone()));
            }
            if verbose {
                o.insert(
                    "tensors".into(),
                    json!(info
                        .tensors
                        .iter()
                        .map(|t| json!({"name": t.name, "type": t.ty, "shape": t.shape}))
                        .collect::<Vec<_>>()),
                );
            }
            for k in ["license", "modelfile", "parameters", "template", "system"] {
                if o.get(k).and_then(Value::as_str) == Some("") {
                    o.remove(k);
                }
            }
            Ok(axum::Json(v).into_response())
        }
        .await,
    )
}

fn not_found_as(e: ApiError, name: &str) -> ApiError {
    if e.status == StatusCode::NOT_FOUND {
        ApiError::not_found(format!("model '{name}' not found"))
    } else {
        e
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CopyBody {
    source: Option<String>,
    destination: Option<String>,
}

pub async fn copy(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    into_response(
        async {
            let req: CopyBody = parse_body(&body)?;
            let src_s = req.source.unwrap_or_default();
            let dst_s = req.destination.unwrap_or_default();
            let src = Name::parse(&src_s)
                .map_err(|_| ApiError::bad_request(format!("source {src_s:?} is invalid")))?;
            let dst = Name::parse(&dst_s)
                .map_err(|_| ApiError::bad_request(format!("destination {dst_s:?} is invalid")))?;
            let store = st.store.clone();
            blocking(move || store.copy(&src, &dst)).await.map_err(|e| {
                if e.status == StatusCode::NOT_FOUND {
                    ApiError::not_found(format!("model {src_s:?} not found"))
                } else {
                    e
                }
            })?;
            Ok(StatusCode::OK.into_response())
        }
        .await,
    )
}

pub async fn delete(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    into_response(
        async {
            let req: NameBody = parse_body(&body)?;
            let requested = req.name()?;
            let name = parse_name(&requested)?;
            let store = st.store.clone();
            let n2 = name.clone();
            let weights = blocking(move || registry::Model::load(&store, &n2))
                .await
                .ok()
                .and_then(|m| m.model_path);
            let store = st.store.clone();
            blocking(move || store.delete(&name))
                .await
                .map_err(|e| not_found_as(e, &requested))?;
            // Unloaded only if its weights went with it: another name (a copy) may still use
            // them, and a model that stays loaded under that name is not reloaded. (Ollama
            // never unloads on delete; a deleted model's memory is freed here at once.)
            if let Some(p) = weights.filter(|p| !p.exists()) {
                st.sched.evict(&p).await;
            }
            Ok(StatusCode::OK.into_response())
        }
        .await,
    )
}

fn progress_json(p: &Progress) -> Value {
    let mut v = json!({ "status": p.status() });
    if let Some(d) = p.digest() {
        v["digest"] = json!(d.to_string());
    }
    if let Some(t) = p.total() {
        v["total"] = json!(t);
    }
    if let Some(c) = p.completed().filter(|&c| c > 0) {
        v["completed"] = json!(c);
    }
    v
}

enum Step {
    Progress(Progress),
    Done(Result<(), ApiError>),
}

/// Runs a long registry operation, answering with its progress as NDJSON (or, when not
/// streaming, with the last status). The operation is cancelled when the client goes away.
async fn progress_response<F, Fut>(streaming: bool, op: F) -> Response
where
    F: FnOnce(Arc<dyn Fn(Progress) + Send + Sync>) -> Fut,
    Fut: std::future::Future<Output = Result<(), ApiError>> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Step>();
    let ptx = tx.clone();
    let fut = op(Arc::new(move |p| {
        let _ = ptx.send(Step::Progress(p));
    }));
    let task = tokio::spawn(async move {
        let r = fut.await;
        let _ = tx.send(Step::Done(r));
    });
    let abort = AbortOnDrop(task.abort_handle());
    if !streaming {
        let mut last = json!({"status": "success"});
        while let Some(step) = rx.recv().await {
            match step {
                Step::Progress(p) => last = progress_json(&p),
                Step::Done(Ok(())) => return axum::Json(last).into_response(),
                Step::Done(Err(e)) => return e.into_response(),
            }
        }
        drop(abort);
        return ApiError::internal("the operation ended unexpectedly").into_response();
    }
    // An error before any progress gets its status code.
    let first = match rx.recv().await {
        Some(Step::Done(Err(e))) => return e.into_response(),
        Some(s) => s,
        None => return ApiError::internal("the operation ended unexpectedly").into_response(),
    };
    let line = |v: Value| {
        let mut s = v.to_string();
        s.push('\n');
        s
    };
    let render = move |s: Step| -> (String, bool) {
        match s {
            Step::Progress(p) => (line(progress_json(&p)), false),
            Step::Done(Ok(())) => (String::new(), true),
            Step::Done(Err(e)) => (line(json!({ "error": e.message })), true),
        }
    };
    let (head, fin) = render(first);
    let rest = stream::unfold((rx, fin, abort), move |(mut rx, fin, abort)| async move {
        if fin {
            return None;
        }
        let (s, fin) = match rx.recv().await {
            Some(s) => render(s),
            None => (String::new(), true),
        };
        Some((s, (rx, fin, abort)))
    });
    let body = stream::once(async move { head })
        .chain(rest)
        .filter(|s| std::future::ready(!s.is_empty()))
        .map(Ok::<_, std::convert::Infallible>);
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub async fn pull(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    into_response(
        async {
            let req: NameBody = parse_body(&body)?;
            let name = parse_name(&req.name()?)?;
            let opts = registry::PullOptions {
                insecure: req.insecure.unwrap_or(false),
                ..registry::PullOptions::default()
            };
            let (client, store) = (st.client.clone(), st.store.clone());
            Ok(
                progress_response(req.stream.unwrap_or(true), move |progress| async move {
                    let progress = crate::metrics::METRICS.counting_pull(progress);
                    client
                        .pull(&store, &name, &opts, &*progress)
                        .await
                        .map_err(ApiError::from)
                })
                .await,
            )
        }
        .await,
    )
}

pub async fn push(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    into_response(
        async {
            let req: NameBody = parse_body(&body)?;
            let name = parse_name(&req.name()?)?;
            let opts = registry::PushOptions {
                insecure: req.insecure.unwrap_or(false),
                ..registry::PushOptions::default()
            };
            let (client, store) = (st.client.clone(), st.store.clone());
            Ok(
                progress_response(req.stream.unwrap_or(true), move |progress| async move {
                    client
                        .push(&store, &name, &opts, &*progress)
                        .await
                        .map_err(ApiError::from)
                })
                .await,
            )
        }
        .await,
    )
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CreateBody {
    model: Option<String>,
    name: Option<String>,
    stream: Option<bool>,
    quantize: Option<String>,
    quantization: Option<String>,
    from: Option<String>,
    files: Option<BTreeMap<String, String>>,
    adapters: Option<BTreeMap<String, String>>,
    template: Option<String>,
    license: Option<Value>,
    system: Option<String>,
    parameters: Option<Map<String, Value>>,
    messages: Option<Vec<CreateMessage>>,
    renderer: Option<String>,
    parser: Option<String>,
    requires: Option<String>,
}

/// A MESSAGE of `/api/create`: typed, so a role or content that is not a string is a 400 (as in
/// Ollama) rather than a message silently stored empty.
#[derive(Deserialize, Default)]
#[serde(default)]
struct CreateMessage {
    role: Option<String>,
    content: Option<String>,
}

fn digests(files: Option<BTreeMap<String, String>>) -> ApiResult<BTreeMap<String, Digest>> {
    files
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| Ok((k, Digest::parse_api(&v).map_err(ApiError::from)?)))
        .collect()
}

pub async fn create(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    into_response(
        async {
            let req: CreateBody = parse_body(&body)?;
            let name_s = req
                .model
                .clone()
                .filter(|s| !s.is_empty())
                .or(req.name.clone().filter(|s| !s.is_empty()))
                .ok_or_else(|| ApiError::bad_request("model is required"))?;
            let name = parse_name(&name_s)?;
            let license = match req.license {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(s)) => vec![s],
                Some(Value::Array(items)) => items
                    .into_iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s),
                        _ => Err(ApiError::bad_request(
                            "license must be a string or a list of strings",
                        )),
                    })
                    .collect::<ApiResult<_>>()?,
                Some(_) => {
                    return Err(ApiError::bad_request(
                        "license must be a string or a list of strings",
                    ))
                }
            };
            let (parameters, warnings) =
                registry::modelfile::Parameters::from_request(&req.parameters.unwrap_or_default())
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
            let messages = req
                .messages
                .unwrap_or_default()
                .into_iter()
                .map(|m| registry::Message {
                    role: m.role.unwrap_or_default().to_lowercase(),
                    content: m.content.unwrap_or_default(),
                })
                .collect();
            let creq = registry::CreateRequest {
                from: req.from,
                files: digests(req.files)?,
                adapters: digests(req.adapters)?,
                template: req.template,
                system: req.system,
                license,
                parameters,
                messages,
                quantize: req.quantize.or(req.quantization),
                renderer: req.renderer,
                parser: req.parser,
                requires: req.requires,
            };
            let (client, store) = (st.client.clone(), st.store.clone());
            Ok(
                progress_response(req.stream.unwrap_or(true), move |progress| async move {
                    for w in warnings {
                        progress(Progress::Warning(w));
                    }
                    let opts = registry::CreateOptions {
                        client: Some(&client),
                        pull: None,
                    };
                    registry::create(&store, &name, creq, opts, &*progress)
                        .await
                        .map_err(ApiError::from)
                })
                .await,
            )
        }
        .await,
    )
}

pub async fn head_blob(State(st): State<Arc<AppState>>, UrlPath(digest): UrlPath<String>) -> Response {
    match Digest::parse_api(&digest) {
        Err(e) => ApiError::from(e).into_response(),
        Ok(d) if st.store.has_blob(&d) => StatusCode::OK.into_response(),
        Ok(_) => ApiError::not_found(format!("blob {digest:?} not found")).into_response(),
    }
}

pub async fn create_blob(
    State(st): State<Arc<AppState>>,
    UrlPath(digest): UrlPath<String>,
    body: Body,
) -> Response {
    into_response(
        async {
            // An answer given before the body is read would leave the connection mid-body:
            // hyper then closes it, and a client that keeps it for its next request (reqwest,
            // httpx) fails that request. So the body is read to its end here too (within the
            // same size and time limits as an upload).
            let d = match Digest::parse_api(&digest) {
                Ok(d) => d,
                Err(e) => {
                    discard(body).await;
                    return Err(e.into());
                }
            };
            if st.store.has_blob(&d) {
                discard(body).await;
                return Ok(StatusCode::OK.into_response());
            }
            // A body that fails is the client's doing (it paused longer than `read_timeout`, or
            // went away): say so with 408 or 400, not 500. The partial blob is removed either way.
            let body_error: Arc<std::sync::Mutex<Option<std::io::Error>>> = Arc::default();
            let seen = body_error.clone();
            let stream = body.into_data_stream().map_err(move |e| {
                let msg = e.to_string();
                *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(body_io_error(e));
                msg
            });
            let written = st.store.write_blob_stream(d, stream).await;
            let body_error = body_error.lock().unwrap_or_else(|p| p.into_inner()).take();
            written.map_err(|e| match (e, body_error) {
                (_, Some(io)) if io.kind() == std::io::ErrorKind::TimedOut => ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("blob upload stalled: {io} (read_timeout, OLLAMARS_READ_TIMEOUT)"),
                ),
                (_, Some(io)) => ApiError::bad_request(format!("reading the blob upload: {io}")),
                (registry::Error::DigestMismatch { want, got }, None) => ApiError::bad_request(format!(
                    "digest mismatch, expected {:?}, got {:?}",
                    want.to_string(),
                    got.to_string()
                )),
                (e, None) => ApiError::from(e),
            })?;
            Ok(StatusCode::CREATED.into_response())
        }
        .await,
    )
}

/// Reads the rest of a request body and drops it (an error ends the reading: the connection
/// is gone then anyway).
async fn discard(body: Body) {
    let mut stream = body.into_data_stream();
    while let Some(Ok(_)) = stream.next().await {}
}

/// The I/O error under a body error (the security layer's idle timeout is one, possibly wrapped
/// again by each body it passed through).
fn body_io_error(e: axum::Error) -> std::io::Error {
    let mut inner = e.into_inner();
    loop {
        inner = match inner.downcast::<std::io::Error>() {
            Ok(io) => return *io,
            Err(other) => match other.downcast::<axum::Error>() {
                Ok(wrapped) => wrapped.into_inner(),
                Err(other) => return std::io::Error::other(other.to_string()),
            },
        };
    }
}

pub async fn ps(State(st): State<Arc<AppState>>) -> Response {
    let models: Vec<Value> = st
        .sched
        .status()
        .into_iter()
        .map(|s| {
            json!({
                "name": s.name,
                "model": s.name,
                "size": s.size,
                "digest": s.digest,
                "details": details_json(&s.details),
                "expires_at": rfc3339(s.expires_at),
                "size_vram": 0,
                "context_length": s.context_length,
            })
        })
        .collect();
    axum::Json(json!({ "models": models })).into_response()
}

/// `/v1/models`.
pub async fn openai_models(State(st): State<Arc<AppState>>) -> Response {
    let store = st.store.clone();
    match blocking(move || store.list()).await {
        Ok(list) => {
            let data: Vec<Value> = list
                .iter()
                .map(|m| {
                    json!({"id": m.name.display_shortest(), "object": "model",
                        "created": crate::util::unix_seconds(m.modified), "owned_by": m.name.namespace()})
                })
                .collect();
            axum::Json(json!({"object": "list", "data": data})).into_response()
        }
        Err(e) => e.openai(),
    }
}

/// `/v1/models/{model}`.
pub async fn openai_model(State(st): State<Arc<AppState>>, UrlPath(model): UrlPath<String>) -> Response {
    let name = match Name::parse(&model) {
        Ok(n) => n,
        Err(e) => return ApiError::from(e).openai(),
    };
    let store = st.store.clone();
    match blocking(move || store.read_manifest(&name)).await {
        Ok(m) => axum::Json(json!({"id": model, "object": "model",
            "created": crate::util::unix_seconds(m.modified), "owned_by": m.name.namespace()}))
        .into_response(),
        Err(e) => not_found_as(e, &model).openai(),
    }
}
