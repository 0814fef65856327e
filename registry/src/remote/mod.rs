//! Talking to registries: the OCI distribution v2 protocol for pull and push.
//!
//! One [`Client`] per process (the daemon keeps one): it holds the HTTP connection pool, the
//! bearer tokens obtained so far, and the downloads in progress, so that concurrent pulls of the
//! same blob share one download. Requests go to `{scheme}://{host}/v2/{namespace}/{model}/...`;
//! on `401` the client answers the `WWW-Authenticate: Bearer` challenge by fetching an anonymous
//! token from the realm and retries once. Redirects are followed by hand: the `Authorization`
//! header is sent only to the registry's own origin, never to a CDN it redirects to.
//!
//! Proxies: reqwest reads `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (and the
//! lowercase forms) from the environment when the client is built, so they apply to every
//! request (`tests/registry_proxy.rs` checks it).

mod auth;
mod download;
mod pull;
mod push;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, LOCATION, WWW_AUTHENTICATE};
use reqwest::{Method, Response, StatusCode, Url};

pub use auth::{parse_challenge, Challenge};
pub use pull::PullOptions;
pub use push::PushOptions;

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::name::{Name, Scheme};

/// A registry client. Cheap to clone; clones share tokens and downloads.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// Bearer tokens by `origin + repository`.
    tokens: Mutex<HashMap<String, String>>,
    /// Downloads in progress, by store root and digest.
    downloads: Mutex<HashMap<(PathBuf, Digest), Weak<download::Shared>>>,
}

/// The user agent, like Ollama's `ollama/<version> (<arch> <os>)`.
pub fn user_agent() -> String {
    format!(
        "ollamars/{} ({} {})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

/// A repository on a registry: where a model's manifests and blobs live.
#[derive(Clone, Debug)]
pub(crate) struct Repo {
    /// `scheme://host[:port]`
    base: Url,
    /// `namespace/model`
    path: String,
    insecure: bool,
}

impl Repo {
    /// The repository of `name`. Plain http needs `insecure`, which also downgrades https names
    /// to http (Ollama's `--insecure`).
    pub(crate) fn new(name: &Name, insecure: bool) -> Result<Repo> {
        if name.scheme() == Scheme::Http && !insecure {
            return Err(Error::InsecureProtocol);
        }
        let scheme = if insecure { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{}/", name.host())).map_err(|e| Error::InvalidName {
            name: name.to_string(),
            reason: format!("the host is not a valid URL host: {e}"),
        })?;
        Ok(Repo {
            base,
            path: name.repository(),
            insecure,
        })
    }

    /// `…/v2/<namespace>/<model>/<rest>` (`rest` is built from validated names and digests).
    pub(crate) fn url(&self, rest: &str) -> Url {
        let mut u = self.base.clone();
        u.set_path(&format!("/v2/{}/{rest}", self.path));
        u
    }

    fn token_key(&self) -> String {
        format!("{}{}", origin(&self.base), self.path)
    }
}

/// `scheme://host:port` of a URL, for same-origin checks.
fn origin(u: &Url) -> String {
    format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str().unwrap_or(""),
        u.port_or_known_default().unwrap_or(0)
    )
}

/// A request body that can be made again for a retry.
pub(crate) type BodyFn<'a> = &'a (dyn Fn() -> reqwest::Body + Send + Sync);

impl Client {
    /// A client with default settings (rustls, proxies from the environment, no automatic
    /// redirects: they are followed by hand, see the module docs).
    pub fn new() -> Result<Client> {
        let http = reqwest::Client::builder()
            .user_agent(user_agent())
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(30))
            // Parallel ranged downloads want several TCP connections, not multiplexed streams.
            .http1_only()
            .tcp_nodelay(true)
            .build()
            .map_err(|e| Error::http("building the HTTP client", e))?;
        Ok(Client::with_http(http))
    }

    /// A client over a given reqwest client, which must not follow redirects itself.
    pub fn with_http(http: reqwest::Client) -> Client {
        Client {
            inner: Arc::new(Inner {
                http,
                tokens: Mutex::new(HashMap::new()),
                downloads: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn token(&self, repo: &Repo) -> Option<String> {
        self.inner
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&repo.token_key())
            .cloned()
    }

    /// Sends a request to `repo`'s registry. A cached bearer token goes with requests to the
    /// registry's origin; a `401` there is answered once with a fresh token. With `follow`,
    /// redirects (GET and HEAD only) are followed up to 10 times, and the token is not sent to
    /// other origins. Returns whatever final response came back.
    pub(crate) async fn send(
        &self,
        repo: &Repo,
        method: Method,
        url: Url,
        headers: HeaderMap,
        body: Option<BodyFn<'_>>,
        follow: bool,
    ) -> Result<Response> {
        let registry = origin(&repo.base);
        let mut url = url;
        let mut authenticated = false;
        let mut redirects = 0;
        loop {
            let same_origin = origin(&url) == registry;
            let mut rb = self
                .inner
                .http
                .request(method.clone(), url.clone())
                .headers(headers.clone());
            if same_origin {
                if let Some(t) = self.token(repo) {
                    rb = rb.bearer_auth(t);
                }
            }
            if let Some(b) = body {
                rb = rb.body(b());
            }
            let host = url.host_str().unwrap_or("registry");
            let what = match url.port() {
                Some(port) => format!("{method} {host}:{port}"),
                None => format!("{method} {host}"),
            };
            let resp = rb.send().await.map_err(|e| {
                // A TLS handshake answered in plain HTTP: say what to do about it, not only
                // rustls's "received corrupt message of type InvalidContentType".
                let plain =
                    url.scheme() == "https" && crate::error::with_causes(&e).contains("InvalidContentType");
                match plain {
                    true => Error::http(format!("{what} (it speaks plain HTTP: use --insecure)"), e),
                    false => Error::http(&what, e),
                }
            })?;
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED && same_origin {
                if authenticated {
                    return Err(Error::Unauthorized(format!(
                        "{what}: the registry refused the token: {}",
                        error_body(resp).await
                    )));
                }
                let challenge = resp
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                self.authenticate(repo, challenge.as_deref()).await?;
                authenticated = true;
                continue;
            }
            if status.is_redirection()
                && follow
                && (method == Method::GET || method == Method::HEAD)
                && status != StatusCode::NOT_MODIFIED
            {
                redirects += 1;
                if redirects > 10 {
                    return Err(Error::Registry {
                        status: status.as_u16(),
                        body: "more than 10 redirects".into(),
                    });
                }
                url = redirect_target(&url, &resp, repo.insecure)?;
                continue;
            }
            return Ok(resp);
        }
    }

    /// Answers a `WWW-Authenticate` challenge: fetches an anonymous bearer token from the realm
    /// for the challenge's scope and caches it for the repository.
    async fn authenticate(&self, repo: &Repo, challenge: Option<&str>) -> Result<()> {
        let c = challenge.and_then(parse_challenge).ok_or_else(|| {
            Error::Unauthorized("the registry requires authentication but sent no challenge".into())
        })?;
        if c.scheme != "bearer" {
            return Err(Error::Unauthorized(format!(
                "the registry asks for {} authentication, which ollamars does not do (only bearer tokens)",
                c.scheme
            )));
        }
        let realm = c
            .param("realm")
            .ok_or_else(|| Error::Unauthorized("bearer challenge without a realm".into()))?;
        let mut url =
            Url::parse(realm).map_err(|e| Error::Unauthorized(format!("bad token realm {realm:?}: {e}")))?;
        if url.scheme() != "https" && !(url.scheme() == "http" && repo.insecure) {
            return Err(Error::Unauthorized(format!(
                "token realm {realm:?} is not https (use --insecure for plain http registries)"
            )));
        }
        {
            let mut q = url.query_pairs_mut();
            if let Some(service) = c.param("service") {
                q.append_pair("service", service);
            }
            let default_scope = format!("repository:{}:pull", repo.path);
            let scope = c.param("scope").unwrap_or(&default_scope);
            for s in scope.split(' ').filter(|s| !s.is_empty()) {
                q.append_pair("scope", s);
            }
        }
        let host = url.host_str().unwrap_or("token server").to_string();
        let resp = self
            .inner
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| Error::http(format!("fetching a token from {host}"), e))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(Error::Unauthorized(format!(
                "token server {host} answered {status}: {}",
                error_body(resp).await
            )));
        }
        let bytes = read_limited(resp, 1 << 20).await?;
        let token = serde_json::from_slice::<auth::TokenResponse>(&bytes)
            .ok()
            .and_then(auth::TokenResponse::into_token)
            .ok_or_else(|| Error::Unauthorized(format!("token server {host} sent no token")))?;
        // A token is sent in a header: refuse anything that cannot be one.
        HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::Unauthorized(format!("token server {host} sent a malformed token")))?;
        self.inner
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(repo.token_key(), token);
        Ok(())
    }
}

/// Where a redirect points, resolved against the current URL. An https -> http downgrade needs
/// `insecure`.
fn redirect_target(from: &Url, resp: &Response, insecure: bool) -> Result<Url> {
    let loc = resp
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Error::Registry {
            status: resp.status().as_u16(),
            body: "redirect without a Location".into(),
        })?;
    let to = from.join(loc).map_err(|e| Error::Registry {
        status: resp.status().as_u16(),
        body: format!("bad redirect location: {e}"),
    })?;
    match to.scheme() {
        "https" => Ok(to),
        "http" if insecure || from.scheme() == "http" => Ok(to),
        other => Err(Error::Registry {
            status: resp.status().as_u16(),
            body: format!("refusing redirect to a {other} URL"),
        }),
    }
}

/// Reads at most `max` bytes of a body (registries are not trusted to send small ones).
pub(crate) async fn read_limited(mut resp: Response, max: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| Error::http("reading a registry response", e))?
    {
        if out.len() + chunk.len() > max {
            return Err(Error::Registry {
                status: 200,
                body: format!("response larger than {max} bytes"),
            });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The start of an error response's body, for messages.
pub(crate) async fn error_body(resp: Response) -> String {
    let bytes = read_limited(resp, 64 << 10).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    match text.char_indices().nth(500) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// Turns an error status into an [`Error::Registry`].
pub(crate) async fn check(resp: Response) -> Result<Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    Err(Error::Registry {
        status: status.as_u16(),
        body: error_body(resp).await,
    })
}
