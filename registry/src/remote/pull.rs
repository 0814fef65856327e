//! Pull: manifest, then every missing blob, then the manifest into the store.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT};
use reqwest::{Method, StatusCode};

use super::download::BlobSource;
use super::{check, read_limited, Client, Repo};
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::manifest::{media, Manifest, MAX_MANIFEST_BYTES};
use crate::name::Name;
use crate::progress::{Progress, ProgressFn};
use crate::store::partial::PartialState;
use crate::store::Store;

/// How to pull.
#[derive(Clone, Debug)]
pub struct PullOptions {
    /// Talk plain http (Ollama's `--insecure`); needed for `http://` names.
    pub insecure: bool,
    /// Most parallel connections per blob (it starts with one and adds more while they help).
    pub connections: usize,
    /// Bytes per ranged request (and per resumable unit of progress).
    pub chunk_size: u64,
    /// Failed attempts at a range before the pull fails.
    pub max_retries: u32,
    /// First pause before a retry; doubled each time (at most a minute).
    pub retry_delay: Duration,
    /// A connection that delivers no byte for this long is dropped and the range asked again.
    pub stall_timeout: Duration,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            insecure: false,
            connections: 8,
            chunk_size: 64 << 20,
            max_retries: 6,
            retry_delay: Duration::from_secs(1),
            stall_timeout: Duration::from_secs(30),
        }
    }
}

impl PullOptions {
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        (self.retry_delay * factor).min(Duration::from_secs(60))
    }
}

impl Client {
    /// Pulls a model into the store: fetches the manifest, downloads the blobs the store lacks
    /// (resuming partial downloads), verifies each before it gets its final name, then writes the
    /// manifest byte for byte as received. Blobs of the model's previous manifest that nothing
    /// uses any more are removed. Ends with [`Progress::Success`].
    pub async fn pull(
        &self,
        store: &Store,
        name: &Name,
        opts: &PullOptions,
        progress: &ProgressFn<'_>,
    ) -> Result<()> {
        let repo = Repo::new(name, opts.insecure)?;
        progress(Progress::PullingManifest);
        let (manifest, bytes) = self.fetch_manifest(&repo, name).await?;
        let digests = manifest.digests();
        let blobs: Vec<(Digest, u64)> = digests
            .iter()
            .map(|d| {
                let size = manifest
                    .all_blobs()
                    .find(|l| l.digest == *d)
                    .map_or(0, |l| l.size);
                (*d, size)
            })
            .collect();
        let pin = store.pin()?;
        pin.add_all(&digests)?;
        let old = store.find_manifest(name).ok().flatten();

        // Fail early, before downloading anything, if the disk cannot take the rest.
        let mut need = 0u64;
        for (d, size) in &blobs {
            if store.has_blob(d) {
                continue;
            }
            let done =
                PartialState::load(&store.partial_state_path(d), d, *size).map_or(0, |s| s.completed());
            need += size - done;
        }
        store.check_space(need)?;

        for &(digest, size) in &blobs {
            let src = BlobSource {
                repo: repo.clone(),
                digest,
                size,
            };
            let report = |completed: u64, total: u64| {
                progress(Progress::Pulling {
                    digest,
                    total,
                    completed,
                })
            };
            self.fetch_blob(store, &src, opts, &report).await?;
        }
        // Every blob was hashed before it got its final name.
        progress(Progress::VerifyingDigest);
        progress(Progress::WritingManifest);
        store.replace_manifest(name, &bytes, old.as_ref().map(|o| &o.manifest), progress)?;
        drop(pin);
        progress(Progress::Success);
        Ok(())
    }

    /// GETs and validates a manifest: Docker v2 or OCI, at most [`MAX_MANIFEST_BYTES`], every
    /// digest well formed, and the body's sha256 equal to `Docker-Content-Digest` if sent.
    pub(crate) async fn fetch_manifest(&self, repo: &Repo, name: &Name) -> Result<(Manifest, Vec<u8>)> {
        let mut headers = HeaderMap::new();
        headers.insert(
            ACCEPT,
            HeaderValue::from_static(
                "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json",
            ),
        );
        let url = repo.url(&format!("manifests/{}", name.tag()));
        let resp = self.send(repo, Method::GET, url, headers, None, true).await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Err(Error::RemoteNotFound(name.display_shortest()));
        }
        let resp = check(resp).await?;
        let header_digest = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = read_limited(resp, MAX_MANIFEST_BYTES).await?;
        if content_type.starts_with(media::DOCKER_MANIFEST_LIST) || content_type.starts_with(media::OCI_INDEX)
        {
            return Err(Error::manifest(format!(
                "{} is a multi-platform index ({content_type}), not a model",
                name.display_shortest()
            )));
        }
        let manifest = Manifest::parse(&bytes)?;
        if let Some(h) = header_digest.and_then(|h| Digest::parse(&h).ok()) {
            let got = Digest::of_bytes(&bytes);
            if h != got {
                return Err(Error::manifest(format!(
                    "the registry says the manifest is {h}, its bytes hash to {got}"
                )));
            }
        }
        Ok((manifest, bytes))
    }
}
