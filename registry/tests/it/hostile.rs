//! A registry that lies: traversal digests, wrong bytes, short bodies, bad headers, redirects to
//! another host. Pulls must fail cleanly, write nothing outside the store, leave no half-written
//! blob and never send our token to another origin.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use registry::manifest::media;
use registry::{Client, Digest, Error, Layer, Manifest, Name, PullOptions};

use crate::common::{self, Events};

/// What the fake registry serves.
#[derive(Default)]
struct Script {
    manifest: Vec<u8>,
    manifest_headers: Vec<(String, String)>,
    /// Blob bytes by the digest text in the URL.
    blobs: HashMap<String, Vec<u8>>,
    /// Blobs answered with a redirect to this URL prefix (+ digest).
    redirect_blobs_to: Option<String>,
    /// Require `Authorization: Bearer good` on the registry (401 challenge otherwise).
    require_token: bool,
    /// Cut blob bodies after this many bytes.
    truncate_at: Option<usize>,
    /// Serve this part of the protocol as a body that never ends.
    endless: Option<Endless>,
    /// Bytes sent in endless bodies so far.
    endless_sent: Arc<AtomicU64>,
    /// Every request: (method, path, authorization header).
    log: Vec<(String, String, Option<String>)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Endless {
    Manifest,
    /// Blobs, ignoring ranges (200, no length).
    Blobs,
    Token,
    /// Error responses (500) with endless bodies.
    ErrorBody,
}

/// A body of pseudo-random bytes that never ends, counting what it sends.
fn endless_body(sent: Arc<AtomicU64>) -> Body {
    let stream = futures_util::stream::unfold(1u64, move |seed| {
        let sent = sent.clone();
        async move {
            sent.fetch_add(64 << 10, Ordering::Relaxed);
            let chunk = bytes::Bytes::from(common::random_bytes(64 << 10, seed));
            Some((Ok::<_, std::io::Error>(chunk), seed + 1))
        }
    });
    Body::from_stream(stream)
}

type Shared = Arc<Mutex<Script>>;

async fn serve(script: Shared) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap| {
        let script = script.clone();
        async move { handle(&script, addr, method, uri, headers) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn handle(script: &Shared, addr: SocketAddr, method: Method, uri: Uri, headers: HeaderMap) -> Response<Body> {
    let mut s = script.lock().unwrap();
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let path = uri.path().to_string();
    s.log.push((method.to_string(), path.clone(), auth.clone()));
    let resp = Response::builder();
    let endless = |part| s.endless == Some(part);
    if endless(Endless::ErrorBody) {
        return resp
            .status(500)
            .body(endless_body(s.endless_sent.clone()))
            .unwrap();
    }
    if path == "/token" {
        if endless(Endless::Token) {
            return resp.body(endless_body(s.endless_sent.clone())).unwrap();
        }
        return resp.body(Body::from(r#"{"token":"good"}"#)).unwrap();
    }
    if s.require_token && path.starts_with("/v2/") && auth.as_deref() != Some("Bearer good") {
        return resp
            .status(StatusCode::UNAUTHORIZED)
            .header(
                "www-authenticate",
                format!(
                    r#"Bearer realm="http://{addr}/token",service="fake",scope="repository:library/m:pull""#
                ),
            )
            .body(Body::empty())
            .unwrap();
    }
    if path.contains("/manifests/") {
        let mut r = resp.header("content-type", media::DOCKER_MANIFEST_V2);
        for (k, v) in &s.manifest_headers {
            r = r.header(k.as_str(), v.as_str());
        }
        if endless(Endless::Manifest) {
            return r.body(endless_body(s.endless_sent.clone())).unwrap();
        }
        return r.body(Body::from(s.manifest.clone())).unwrap();
    }
    if let Some(d) = path.rsplit("/blobs/").next().filter(|_| path.contains("/blobs/")) {
        if let Some(prefix) = &s.redirect_blobs_to {
            if path.starts_with("/v2/") {
                return resp
                    .status(StatusCode::TEMPORARY_REDIRECT)
                    .header("location", format!("{prefix}{d}"))
                    .body(Body::empty())
                    .unwrap();
            }
        }
        if endless(Endless::Blobs) {
            return resp.body(endless_body(s.endless_sent.clone())).unwrap();
        }
        let Some(bytes) = s.blobs.get(d).cloned() else {
            return resp.status(404).body(Body::empty()).unwrap();
        };
        return serve_range(bytes, &headers, s.truncate_at);
    }
    resp.status(404).body(Body::empty()).unwrap()
}

fn serve_range(bytes: Vec<u8>, headers: &HeaderMap, truncate: Option<usize>) -> Response<Body> {
    let total = bytes.len();
    let range = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
    let (status, start, end) = match range {
        Some((a, b)) if a < total => (StatusCode::PARTIAL_CONTENT, a, b.min(total - 1) + 1),
        Some(_) => return Response::builder().status(416).body(Body::empty()).unwrap(),
        None => (StatusCode::OK, 0, total),
    };
    let mut body = bytes[start..end].to_vec();
    let declared = body.len();
    if let Some(t) = truncate {
        body.truncate(t.saturating_sub(start));
    }
    let mut r = Response::builder().status(status);
    if status == StatusCode::PARTIAL_CONTENT {
        r = r.header("content-range", format!("bytes {start}-{}/{total}", end - 1));
    }
    if body.len() < declared {
        // Announce the full length and send less: the client sees the connection end early.
        let stream = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(bytes::Bytes::from(body))])
            .chain(futures_util::stream::once(async {
                Err(std::io::Error::other("cut"))
            }));
        return r.body(Body::from_stream(stream)).unwrap();
    }
    r.body(Body::from(body)).unwrap()
}

use futures_util::StreamExt as _;

fn manifest_with(layers: Vec<Layer>, config: Layer) -> Vec<u8> {
    Manifest::new(config, layers).to_bytes()
}

fn opts() -> PullOptions {
    PullOptions {
        insecure: true,
        max_retries: 2,
        retry_delay: Duration::from_millis(10),
        stall_timeout: Duration::from_secs(5),
        chunk_size: 1 << 20,
        ..PullOptions::default()
    }
}

/// Pulls `http://addr/library/m` into a fresh store; returns the result, the store and its
/// temp dir (whose other contents must stay untouched).
async fn pull_from(addr: SocketAddr) -> (Result<(), Error>, tempfile::TempDir, registry::Store) {
    let (dir, store) = common::store();
    let name = Name::parse(&format!("{addr}/library/m")).unwrap();
    let client = Client::new().unwrap();
    let ev = Events::default();
    let r = client.pull(&store, &name, &opts(), &|p| ev.push(p)).await;
    (r, dir, store)
}

/// Nothing but the empty skeleton in the store; nothing else in its parent directory.
fn assert_clean(dir: &tempfile::TempDir, store: &registry::Store) {
    let files = common::tree(dir.path());
    assert!(
        files.iter().all(|f| f == "models/.ollamars/lock"),
        "files left: {files:?}"
    );
    assert!(store.list().unwrap().is_empty());
}

#[tokio::test]
async fn traversal_digests_are_rejected_before_any_write() {
    let good = Digest::of_bytes(b"{}");
    let hostile = [
        "sha256:../../../../../../tmp/ollamars-pwned",
        "sha256:../../../../../../../../../../../../../../../../../../../../../../../tmp/x",
        "../../../../etc/passwd",
        "sha256-0000000000000000000000000000000000000000000000000000000000000000",
        "sha256:/etc/passwd",
    ];
    for bad in hostile {
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"{}","config":{{"mediaType":"{}","digest":"{good}","size":2}},"layers":[{{"mediaType":"{}","digest":"{bad}","size":5}}]}}"#,
            media::DOCKER_MANIFEST_V2,
            media::DOCKER_CONFIG,
            media::MODEL
        );
        let script = Shared::default();
        {
            let mut s = script.lock().unwrap();
            s.manifest = manifest.into_bytes();
            s.blobs.insert(bad.to_string(), b"pwned".to_vec());
            s.blobs.insert(good.to_string(), b"{}".to_vec());
        }
        let addr = serve(script.clone()).await;
        let (r, dir, store) = pull_from(addr).await;
        let err = r.unwrap_err();
        assert!(matches!(err, Error::InvalidManifest(_)), "{bad}: {err}");
        assert_clean(&dir, &store);
        // No blob was even asked for.
        assert!(script
            .lock()
            .unwrap()
            .log
            .iter()
            .all(|(_, p, _)| !p.contains("/blobs/")));
    }
    assert!(!std::path::Path::new("/tmp/ollamars-pwned").exists());
}

#[tokio::test]
async fn wrong_bytes_are_a_digest_mismatch_and_are_removed() {
    let config = b"{}".to_vec();
    let real = common::random_bytes(3 << 20, 1);
    let announced = Digest::of_bytes(&real);
    let mut served = real.clone();
    served[2_500_000] ^= 1; // one flipped bit in the third chunk
    let script = Shared::default();
    {
        let mut s = script.lock().unwrap();
        s.manifest = manifest_with(
            vec![Layer::new(media::MODEL, announced, real.len() as u64)],
            Layer::new(media::DOCKER_CONFIG, Digest::of_bytes(&config), 2),
        );
        s.blobs.insert(announced.to_string(), served);
        s.blobs.insert(Digest::of_bytes(&config).to_string(), config);
    }
    let addr = serve(script).await;
    let (r, dir, store) = pull_from(addr).await;
    let err = r.unwrap_err();
    match &err {
        Error::DigestMismatch { want, got } => {
            assert_eq!(*want, announced);
            assert_ne!(*got, announced);
        }
        e => panic!("{e}"),
    }
    assert!(err.to_string().contains("digest mismatch"));
    assert_clean(&dir, &store);
}

#[tokio::test]
async fn short_bodies_fail_after_retries() {
    let real = common::random_bytes(1 << 20, 2);
    let d = Digest::of_bytes(&real);
    let script = Shared::default();
    {
        let mut s = script.lock().unwrap();
        s.manifest = manifest_with(vec![], Layer::new(media::DOCKER_CONFIG, d, real.len() as u64));
        s.blobs.insert(d.to_string(), real);
        s.truncate_at = Some(1000);
    }
    let addr = serve(script.clone()).await;
    let (r, _dir, store) = pull_from(addr).await;
    let err = r.unwrap_err();
    assert!(matches!(err, Error::Http { .. } | Error::Io { .. }), "{err}");
    assert!(store.list().unwrap().is_empty());
    assert!(!store.has_blob(&d));
    // One request to find the blob, then the first try and two retries.
    let gets = script
        .lock()
        .unwrap()
        .log
        .iter()
        .filter(|(m, p, _)| m == "GET" && p.contains("/blobs/"))
        .count();
    assert_eq!(gets, 4);
}

#[tokio::test]
async fn manifest_digest_header_and_size_limits() {
    let config = b"{}".to_vec();
    let d = Digest::of_bytes(&config);
    let script = Shared::default();
    {
        let mut s = script.lock().unwrap();
        s.manifest = manifest_with(vec![], Layer::new(media::DOCKER_CONFIG, d, 2));
        s.manifest_headers = vec![(
            "docker-content-digest".into(),
            Digest::of_bytes(b"something else").to_string(),
        )];
        s.blobs.insert(d.to_string(), config);
    }
    let addr = serve(script.clone()).await;
    let (r, dir, store) = pull_from(addr).await;
    assert!(matches!(r.unwrap_err(), Error::InvalidManifest(m) if m.contains("hash to")));
    assert_clean(&dir, &store);

    // A manifest larger than any real one.
    {
        let mut s = script.lock().unwrap();
        s.manifest_headers.clear();
        s.manifest = vec![b' '; 5 << 20];
    }
    let (r, dir, store) = pull_from(addr).await;
    assert!(r.is_err());
    assert_clean(&dir, &store);

    // A multi-platform index is not a model.
    {
        let mut s = script.lock().unwrap();
        s.manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"{}","manifests":[]}}"#,
            media::OCI_INDEX
        )
        .into_bytes();
    }
    let (r, dir, store) = pull_from(addr).await;
    assert!(matches!(r.unwrap_err(), Error::InvalidManifest(m) if m.contains("index")));
    assert_clean(&dir, &store);
}

#[tokio::test]
async fn tokens_stay_on_the_registry_when_blobs_redirect_elsewhere() {
    // The "CDN" is the same kind of server on another port, reached as `localhost` (another
    // origin than the registry's 127.0.0.1).
    let blob = common::random_bytes(3 << 20, 3);
    let d = Digest::of_bytes(&blob);
    let cdn = Shared::default();
    cdn.lock().unwrap().blobs.insert(d.to_string(), blob.clone());
    let cdn_addr = serve(cdn.clone()).await;
    let reg = Shared::default();
    {
        let mut s = reg.lock().unwrap();
        s.require_token = true;
        s.manifest = manifest_with(vec![], Layer::new(media::DOCKER_CONFIG, d, blob.len() as u64));
        s.redirect_blobs_to = Some(format!("http://localhost:{}/cdn/blobs/", cdn_addr.port()));
    }
    let addr = serve(reg.clone()).await;
    let (r, _dir, store) = pull_from(addr).await;
    r.unwrap();
    assert!(store.has_blob(&d));
    let reg_log = reg.lock().unwrap().log.clone();
    // The registry saw a challenge answered with the token...
    assert!(reg_log
        .iter()
        .any(|(_, p, a)| p.starts_with("/v2/") && a.as_deref() == Some("Bearer good")));
    assert!(reg_log.iter().any(|(_, p, _)| p == "/token"));
    // ...and the CDN got several ranged requests, none with it.
    let cdn_log = cdn.lock().unwrap().log.clone();
    assert!(cdn_log.len() >= 3, "{cdn_log:?}");
    assert!(cdn_log.iter().all(|(_, _, a)| a.is_none()), "{cdn_log:?}");
}

#[tokio::test]
async fn endless_bodies_are_cut_off_with_a_clean_error() {
    let blob_size = 2u64 << 20;
    let config = Digest::of_bytes(b"{}");
    let weights = Digest::of_bytes(b"the real weights");
    let manifest = manifest_with(
        vec![Layer::new(media::MODEL, weights, blob_size)],
        Layer::new(media::DOCKER_CONFIG, config, 2),
    );
    for (part, limit) in [
        // The manifest read stops at the 4 MiB manifest limit.
        (Endless::Manifest, registry::manifest::MAX_MANIFEST_BYTES as u64),
        // A blob is read up to its announced size, then hashed: garbage is a mismatch.
        (Endless::Blobs, blob_size),
        // A token response is read up to 1 MiB.
        (Endless::Token, 1 << 20),
        // Error bodies are read up to 64 KiB for the message.
        (Endless::ErrorBody, 64 << 10),
    ] {
        let script = Shared::default();
        let sent = {
            let mut s = script.lock().unwrap();
            s.manifest = manifest.clone();
            s.blobs.insert(config.to_string(), b"{}".to_vec());
            s.endless = Some(part);
            s.require_token = part == Endless::Token;
            s.endless_sent.clone()
        };
        let addr = serve(script).await;
        let (r, dir, store) = tokio::time::timeout(Duration::from_secs(60), pull_from(addr))
            .await
            .expect("an endless body must not hang the pull");
        let err = r.unwrap_err();
        match part {
            Endless::Manifest => assert!(err.to_string().contains("larger than"), "{err}"),
            Endless::Blobs => assert!(
                matches!(err, Error::DigestMismatch { want, .. } if want == weights),
                "{err}"
            ),
            Endless::Token => assert!(
                matches!(err, Error::Unauthorized(_) | Error::Registry { .. }),
                "{err}"
            ),
            Endless::ErrorBody => assert!(matches!(err, Error::Registry { status: 500, .. }), "{err}"),
        }
        // The client stopped reading soon after its limit (socket buffers hold a few MiB), on
        // every retry together.
        let read = sent.load(Ordering::Relaxed);
        let retries = u64::from(opts().max_retries) + 2;
        assert!(
            read <= retries * (limit + (16 << 20)),
            "{read} bytes sent for a {limit}-byte limit"
        );
        assert_clean(&dir, &store);
    }
}

#[tokio::test]
async fn manifest_redirects_to_other_hosts_carry_no_token() {
    // The registry wants a token and redirects the manifest (and blobs) to another origin.
    let config = b"{}".to_vec();
    let d = Digest::of_bytes(&config);
    let manifest = manifest_with(vec![], Layer::new(media::DOCKER_CONFIG, d, 2));
    let other = Shared::default();
    {
        let mut s = other.lock().unwrap();
        s.manifest = manifest.clone();
        s.blobs.insert(d.to_string(), config.clone());
    }
    let other_addr = serve(other.clone()).await;
    let redirecting = Shared::default();
    let addr = serve_redirecting(redirecting.clone(), other_addr.port()).await;
    let (r, _dir, store) = pull_from(addr).await;
    r.unwrap();
    assert!(store.has_blob(&d));
    assert_eq!(store.list().unwrap().len(), 1);
    let log = redirecting.lock().unwrap().log.clone();
    assert!(
        log.iter()
            .any(|(_, p, a)| p.contains("/manifests/") && a.as_deref() == Some("Bearer good")),
        "{log:?}"
    );
    let other_log = other.lock().unwrap().log.clone();
    assert!(
        other_log.iter().any(|(_, p, _)| p.contains("/manifests/")),
        "{other_log:?}"
    );
    assert!(
        other_log.iter().all(|(_, _, a)| a.is_none()),
        "token leaked: {other_log:?}"
    );
}

/// A registry that challenges for a token, then redirects every `/v2/` request to the same path
/// on `localhost:<port>` (another origin).
async fn serve_redirecting(script: Shared, port: u16) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap| {
        let script = script.clone();
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let path = uri.path().to_string();
            script
                .lock()
                .unwrap()
                .log
                .push((method.to_string(), path.clone(), auth.clone()));
            if path == "/token" {
                return Response::builder()
                    .body(Body::from(r#"{"token":"good"}"#))
                    .unwrap();
            }
            if auth.as_deref() != Some("Bearer good") {
                return Response::builder()
                    .status(StatusCode::UNAUTHORIZED)
                    .header(
                        "www-authenticate",
                        format!(r#"Bearer realm="http://{addr}/token",service="fake""#),
                    )
                    .body(Body::empty())
                    .unwrap();
            }
            Response::builder()
                .status(StatusCode::TEMPORARY_REDIRECT)
                .header("location", format!("http://localhost:{port}{path}"))
                .body(Body::empty())
                .unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A registry that is not there: the error says why (the connection was refused), not only
/// reqwest's "error sending request", and the store is left as it was.
#[tokio::test]
async fn an_unreachable_registry_is_reported_with_the_cause() {
    // A port that was just free: bound, then closed.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (r, dir, store) = pull_from(addr).await;
    let err = r.unwrap_err();
    assert!(matches!(err, Error::Http { .. }), "{err}");
    let text = err.to_string();
    assert!(text.starts_with(&format!("GET {addr}: ")), "{text}");
    assert!(text.to_lowercase().contains("connection refused"), "{text}");
    assert_clean(&dir, &store);
}

/// A plain-HTTP registry pulled from without `insecure` (so over TLS): the error says to use
/// `--insecure`, not only rustls's "received corrupt message of type InvalidContentType".
#[tokio::test]
async fn a_plain_http_registry_without_insecure_says_to_use_it() {
    let addr = serve(Shared::default()).await;
    let (dir, store) = common::store();
    let name = Name::parse(&format!("{addr}/library/m")).unwrap();
    let over_tls = PullOptions {
        insecure: false,
        ..opts()
    };
    let r = Client::new()
        .unwrap()
        .pull(&store, &name, &over_tls, &|_| {})
        .await;
    let text = r.unwrap_err().to_string();
    assert!(
        text.starts_with(&format!("GET {addr} (it speaks plain HTTP: use --insecure): ")),
        "{text}"
    );
    assert_clean(&dir, &store);
}
