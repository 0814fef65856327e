//! Push: every blob the registry lacks (mounted from another repository when possible, else
//! uploaded whole or in chunks), then the manifest.

use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, LOCATION};
use reqwest::{Method, StatusCode, Url};

use super::{check, error_body, Client, Repo};
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::manifest::Layer;
use crate::name::Name;
use crate::progress::{Progress, ProgressFn};
use crate::store::Store;

/// How to push.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// Talk plain http (Ollama's `--insecure`).
    pub insecure: bool,
    /// Blobs up to this size go in one `PUT`; larger ones in `PATCH` chunks of this size.
    pub chunk_size: u64,
    /// Attempts per blob before the push fails.
    pub max_retries: u32,
    /// First pause before a retry; doubled each time.
    pub retry_delay: Duration,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            insecure: false,
            chunk_size: 64 << 20,
            max_retries: 6,
            retry_delay: Duration::from_secs(1),
        }
    }
}

impl Client {
    /// Pushes a model from the store: for each blob (layers, then config) a `HEAD`; the missing
    /// ones are mounted from the repository named by their `from` when it is on the same registry,
    /// or uploaded; then the manifest file's exact bytes are `PUT`, so the registry's manifest
    /// digest equals the local model's ID. Ends with [`Progress::Success`].
    pub async fn push(
        &self,
        store: &Store,
        name: &Name,
        opts: &PushOptions,
        progress: &ProgressFn<'_>,
    ) -> Result<()> {
        progress(Progress::RetrievingManifest);
        let repo = Repo::new(name, opts.insecure)?;
        let local = store.read_manifest(name)?;
        let mut seen = Vec::new();
        for layer in local.manifest.all_blobs() {
            if seen.contains(&layer.digest) {
                continue;
            }
            seen.push(layer.digest);
            self.push_blob(store, &repo, name, layer, opts, progress).await?;
        }
        progress(Progress::PushingManifest);
        let url = repo.url(&format!("manifests/{}", name.tag()));
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_str(local.manifest.content_type())
                .map_err(|_| Error::manifest("media type is not a valid header value"))?,
        );
        let body = Bytes::from(local.bytes.clone());
        let make = || reqwest::Body::from(body.clone());
        let resp = self
            .send(&repo, Method::PUT, url, headers, Some(&make), false)
            .await?;
        let resp = check(resp).await?;
        if let Some(d) = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .and_then(|s| Digest::parse(s).ok())
        {
            if d != local.digest {
                tracing::warn!(registry = %d, local = %local.digest, "the registry stored the manifest under another digest");
            }
        }
        progress(Progress::Success);
        Ok(())
    }

    async fn push_blob(
        &self,
        store: &Store,
        repo: &Repo,
        name: &Name,
        layer: &Layer,
        opts: &PushOptions,
        progress: &ProgressFn<'_>,
    ) -> Result<()> {
        let digest = layer.digest;
        let size = store.blob_size(&digest).ok_or(Error::BlobNotFound(digest))?;
        let report = |completed: u64| {
            progress(Progress::Pushing {
                digest,
                total: size,
                completed,
            })
        };
        let head = self
            .send(
                repo,
                Method::HEAD,
                repo.url(&format!("blobs/{digest}")),
                HeaderMap::new(),
                None,
                true,
            )
            .await?;
        match head.status() {
            s if s.is_success() => {
                report(size);
                return Ok(());
            }
            StatusCode::NOT_FOUND => {}
            _ => {
                check(head).await?;
            }
        }
        let mount_from = layer
            .from
            .as_deref()
            .and_then(|f| Name::parse(f).ok())
            .filter(|f| f.host().eq_ignore_ascii_case(name.host()) && f.repository() != repo.path);
        let sent = Arc::new(AtomicU64::new(0));
        let mut attempt = 0;
        loop {
            sent.store(0, Ordering::Relaxed);
            let upload = self.upload(store, repo, digest, size, mount_from.as_ref(), opts, sent.clone());
            tokio::pin!(upload);
            let mut tick = tokio::time::interval(Duration::from_millis(60));
            let result = loop {
                tokio::select! {
                    r = &mut upload => break r,
                    _ = tick.tick() => report(sent.load(Ordering::Relaxed)),
                }
            };
            match result {
                Ok(()) => {
                    report(size);
                    return Ok(());
                }
                Err(e) if attempt < opts.max_retries && retryable(&e) => {
                    attempt += 1;
                    tracing::info!(digest = %digest.short(), attempt, error = %e, "upload failed; retrying");
                    let factor = 1u32 << (attempt - 1).min(16);
                    tokio::time::sleep((opts.retry_delay * factor).min(Duration::from_secs(60))).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt at uploading a blob: start an upload session (or mount), send the bytes, and
    /// commit with the digest.
    #[allow(clippy::too_many_arguments)]
    async fn upload(
        &self,
        store: &Store,
        repo: &Repo,
        digest: Digest,
        size: u64,
        mount_from: Option<&Name>,
        opts: &PushOptions,
        sent: Arc<AtomicU64>,
    ) -> Result<()> {
        let mut start = repo.url("blobs/uploads/");
        if let Some(from) = mount_from {
            start
                .query_pairs_mut()
                .append_pair("mount", &digest.to_string())
                .append_pair("from", &from.repository());
        }
        let resp = self
            .send(repo, Method::POST, start.clone(), HeaderMap::new(), None, false)
            .await?;
        if resp.status() == StatusCode::CREATED && mount_from.is_some() {
            sent.store(size, Ordering::Relaxed);
            return Ok(()); // mounted from the other repository
        }
        let resp = check(resp).await?;
        let mut location = upload_location(&start, &resp)?;
        let chunk = opts.chunk_size.max(1 << 20);
        let path = store.blob_path(&digest);
        let read = |offset: u64, len: u64| {
            let path = path.clone();
            async move {
                tokio::task::spawn_blocking(move || -> std::io::Result<Bytes> {
                    let mut f = std::fs::File::open(&path)?;
                    f.seek(SeekFrom::Start(offset))?;
                    let mut buf = vec![0u8; len as usize];
                    f.read_exact(&mut buf)?;
                    Ok(Bytes::from(buf))
                })
                .await
                .map_err(|e| Error::io("reading a blob to push", std::io::Error::other(e)))?
                .map_err(|e| Error::io(format!("reading blob {digest}"), e))
            }
        };
        if size <= chunk {
            // Monolithic upload: PUT <location>?digest=… with the whole blob.
            let data = read(0, size).await?;
            let mut url = location;
            url.query_pairs_mut().append_pair("digest", &digest.to_string());
            let resp = self.put_bytes(repo, Method::PUT, url, data, None, &sent).await?;
            expect(resp, StatusCode::CREATED).await?;
            return Ok(());
        }
        // Chunked upload: PATCH each chunk in order, then PUT ?digest=… with no body.
        let mut offset = 0;
        while offset < size {
            let len = chunk.min(size - offset);
            let data = read(offset, len).await?;
            let range = format!("{}-{}", offset, offset + len - 1);
            let resp = self
                .put_bytes(repo, Method::PATCH, location.clone(), data, Some(&range), &sent)
                .await?;
            let resp = expect(resp, StatusCode::ACCEPTED).await?;
            location = upload_location(&location, &resp)?;
            offset += len;
        }
        let mut url = location;
        url.query_pairs_mut().append_pair("digest", &digest.to_string());
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        let empty = || reqwest::Body::from(Bytes::new());
        let resp = self
            .send(repo, Method::PUT, url, headers, Some(&empty), false)
            .await?;
        expect(resp, StatusCode::CREATED).await?;
        Ok(())
    }

    /// Sends `data` as the body, counting bytes into `sent` as the body is consumed (a retry of
    /// the request counts again from where this call started).
    async fn put_bytes(
        &self,
        repo: &Repo,
        method: Method,
        url: Url,
        data: Bytes,
        range: Option<&str>,
        sent: &Arc<AtomicU64>,
    ) -> Result<reqwest::Response> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from(data.len() as u64));
        if let Some(r) = range {
            headers.insert(
                CONTENT_RANGE,
                HeaderValue::from_str(r).map_err(|_| Error::request("bad range"))?,
            );
        }
        let base = sent.load(Ordering::Relaxed);
        let sent2 = sent.clone();
        let make = move || {
            sent2.store(base, Ordering::Relaxed);
            let counter = sent2.clone();
            let pieces: Vec<Bytes> = (0..data.len())
                .step_by(1 << 20)
                .map(|i| data.slice(i..(i + (1 << 20)).min(data.len())))
                .collect();
            let stream = futures_util::stream::iter(pieces.into_iter().map(move |p| {
                counter.fetch_add(p.len() as u64, Ordering::Relaxed);
                Ok::<Bytes, std::io::Error>(p)
            }));
            reqwest::Body::wrap_stream(stream)
        };
        self.send(repo, method, url, headers, Some(&make), false).await
    }
}

/// The next upload URL (`Location` or Ollama's `Docker-Upload-Location`), resolved against the
/// request's URL.
fn upload_location(base: &Url, resp: &reqwest::Response) -> Result<Url> {
    let loc = resp
        .headers()
        .get("docker-upload-location")
        .or_else(|| resp.headers().get(LOCATION))
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Error::Registry {
            status: resp.status().as_u16(),
            body: "upload response without a Location".into(),
        })?;
    base.join(loc).map_err(|e| Error::Registry {
        status: resp.status().as_u16(),
        body: format!("bad upload location {loc:?}: {e}"),
    })
}

async fn expect(resp: reqwest::Response, want: StatusCode) -> Result<reqwest::Response> {
    if resp.status() == want {
        return Ok(resp);
    }
    Err(Error::Registry {
        status: resp.status().as_u16(),
        body: error_body(resp).await,
    })
}

/// Transport errors and server errors are worth another attempt; refusals are not.
fn retryable(e: &Error) -> bool {
    match e {
        Error::Http { .. } => true,
        Error::Registry { status, .. } => *status >= 500 || *status == 408 || *status == 429,
        _ => false,
    }
}
