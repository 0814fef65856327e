//! Progress of pull, push and create, with Ollama's status texts.
//!
//! The daemon turns each event into an NDJSON line `{"status": ..., "digest": ..., "total": ...,
//! "completed": ...}` using [`Progress::status`], [`Progress::digest`], [`Progress::total`] and
//! [`Progress::completed`]; the registry itself knows nothing of the wire format.

use crate::digest::Digest;

/// A progress callback. Called from the task doing the work; it should not block (send to a
/// channel). Transfer events come at most every 60 ms per blob, plus a final one.
pub type ProgressFn<'a> = dyn Fn(Progress) + Send + Sync + 'a;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Pull: fetching the manifest (`pulling manifest`).
    PullingManifest,
    /// Pull: one blob (`pulling 6a0746a1ec1a`).
    Pulling {
        digest: Digest,
        total: u64,
        completed: u64,
    },
    /// Pull: after the downloads (`verifying sha256 digest`). Every blob was hashed before it got
    /// its final name.
    VerifyingDigest,
    /// Pull and create (`writing manifest`).
    WritingManifest,
    /// Pull and create, when blobs of the replaced manifest are no longer used
    /// (`removing unused layers`).
    RemovingUnusedLayers,
    /// Push: reading the local manifest (`retrieving manifest`).
    RetrievingManifest,
    /// Push: one blob (`pushing 6a0746a1ec1a`).
    Pushing {
        digest: Digest,
        total: u64,
        completed: u64,
    },
    /// Push (`pushing manifest`).
    PushingManifest,
    /// Create: reading GGUF files (`parsing GGUF`).
    ParsingGguf,
    /// Create: joining the parts of a split GGUF into one model blob.
    MergingSplitGguf { parts: usize },
    /// Create (`using existing layer sha256:…`).
    UsingExistingLayer(Digest),
    /// Create (`creating new layer sha256:…`).
    CreatingNewLayer(Digest),
    /// Create with `quantize` (`quantizing F16 model to Q4_K_M`), in tensor bytes done.
    Quantizing {
        from: String,
        to: String,
        total: u64,
        completed: u64,
    },
    /// Something the user should know that does not stop the operation (deprecated parameters).
    Warning(String),
    /// The operation finished (`success`).
    Success,
}

impl Progress {
    /// The `status` text, as Ollama writes it.
    pub fn status(&self) -> String {
        match self {
            Progress::PullingManifest => "pulling manifest".into(),
            Progress::Pulling { digest, .. } => format!("pulling {}", digest.short()),
            Progress::VerifyingDigest => "verifying sha256 digest".into(),
            Progress::WritingManifest => "writing manifest".into(),
            Progress::RemovingUnusedLayers => "removing unused layers".into(),
            Progress::RetrievingManifest => "retrieving manifest".into(),
            Progress::Pushing { digest, .. } => format!("pushing {}", digest.short()),
            Progress::PushingManifest => "pushing manifest".into(),
            Progress::ParsingGguf => "parsing GGUF".into(),
            Progress::MergingSplitGguf { parts } => {
                format!("merging {parts} split GGUF files into one")
            }
            Progress::UsingExistingLayer(d) => format!("using existing layer {d}"),
            Progress::CreatingNewLayer(d) => format!("creating new layer {d}"),
            Progress::Quantizing { from, to, .. } => format!("quantizing {from} model to {to}"),
            Progress::Warning(w) => format!("warning: {w}"),
            Progress::Success => "success".into(),
        }
    }

    /// The `digest` field of transfer events.
    pub fn digest(&self) -> Option<&Digest> {
        match self {
            Progress::Pulling { digest, .. } | Progress::Pushing { digest, .. } => Some(digest),
            _ => None,
        }
    }

    /// The `total` field (bytes) of transfer and quantization events.
    pub fn total(&self) -> Option<u64> {
        match self {
            Progress::Pulling { total, .. }
            | Progress::Pushing { total, .. }
            | Progress::Quantizing { total, .. } => Some(*total),
            _ => None,
        }
    }

    /// The `completed` field (bytes) of transfer and quantization events.
    pub fn completed(&self) -> Option<u64> {
        match self {
            Progress::Pulling { completed, .. }
            | Progress::Pushing { completed, .. }
            | Progress::Quantizing { completed, .. } => Some(*completed),
            _ => None,
        }
    }
}

/// Runs blocking work (file hashing, GGUF writing, quantization) on tokio's blocking pool,
/// forwarding its progress events to `progress` as they come.
pub(crate) async fn run_blocking<T, F>(progress: &ProgressFn<'_>, work: F) -> crate::Result<T>
where
    T: Send + 'static,
    F: FnOnce(&dyn Fn(Progress)) -> crate::Result<T> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut handle = tokio::task::spawn_blocking(move || {
        work(&|p| {
            let _ = tx.send(p);
        })
    });
    loop {
        tokio::select! {
            Some(p) = rx.recv() => progress(p),
            res = &mut handle => {
                while let Ok(p) = rx.try_recv() {
                    progress(p);
                }
                return res.map_err(|e| crate::Error::io("background task", std::io::Error::other(e)))?;
            }
        }
    }
}
