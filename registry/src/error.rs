//! The registry's one error type.
//!
//! Errors are `Clone` (non-clonable sources are kept behind `Arc`) because one failed download can
//! be reported to every pull that was waiting on it. Messages never contain absolute paths of the
//! models directory: files in the store are named by their path relative to the store root.

use std::fmt;
use std::sync::Arc;

use crate::digest::Digest;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// A model name that does not parse or has an invalid part.
    #[error("invalid model name {name:?}: {reason}")]
    InvalidName { name: String, reason: String },
    /// A digest that is not `sha256:` followed by 64 lowercase hex digits.
    #[error("invalid digest {0:?}: expected \"sha256:\" followed by 64 lowercase hex digits")]
    InvalidDigest(String),
    /// No model of this name in the local store.
    #[error("model '{0}' not found")]
    ModelNotFound(String),
    /// A manifest refers to a blob the store does not have.
    #[error("blob {0} not found in the store")]
    BlobNotFound(Digest),
    /// Bytes whose sha256 is not the digest they were announced under. The bad data is removed.
    #[error("digest mismatch, file must be downloaded again: want {want}, got {got}")]
    DigestMismatch { want: Digest, got: Digest },
    /// Content whose size is not the size it was announced with.
    #[error("size mismatch for {digest}: expected {want} bytes, got {got}")]
    SizeMismatch { digest: Digest, want: u64, got: u64 },
    /// A filesystem operation failed; `what` says what was being done, on which (relative) path.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The disk cannot hold what we are about to write.
    #[error("not enough disk space in the models directory: need {need} more bytes, {available} available")]
    NoSpace { need: u64, available: u64 },
    /// A manifest (local or from a registry) that is malformed or unsafe.
    #[error("invalid manifest: {0}")]
    InvalidManifest(String),
    /// A Modelfile that does not parse; `line` is 1-based.
    #[error("{0}")]
    Modelfile(#[from] crate::modelfile::ParseError),
    /// A create request or model parameters that cannot be honoured (400 in the API).
    #[error("{0}")]
    InvalidRequest(String),
    /// A GGUF file that the engine cannot read.
    #[error("{0}")]
    Gguf(Arc<engine::Error>),
    /// The registry has no such model (HTTP 404 on the manifest).
    #[error("pull model manifest: file does not exist ({0} was not found on the registry)")]
    RemoteNotFound(String),
    /// The registry answered with an error status.
    #[error("registry responded {status}: {body}")]
    Registry { status: u16, body: String },
    /// Authentication with the registry failed.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// A plain-http registry used without `insecure`.
    #[error("insecure protocol http: use --insecure to pull or push over plain http")]
    InsecureProtocol,
    /// Transport-level failure talking to a registry. Shown with its causes: reqwest's own
    /// text ("error sending request") does not say whether the name did not resolve, the
    /// connection was refused or it timed out.
    #[error("{context}: {}", with_causes(source.as_ref()))]
    Http {
        context: String,
        #[source]
        source: Arc<reqwest::Error>,
    },
    /// The operation was cancelled (every caller waiting on it went away).
    #[error("operation cancelled")]
    Cancelled,
}

/// `e` and its chain of sources on one line, each once, joined by ": " (the CLI's transport
/// errors too).
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

impl Error {
    pub(crate) fn io(what: impl fmt::Display, source: std::io::Error) -> Error {
        // ENOSPC is reported with its own wording by the OS ("No space left on device"); keep it.
        Error::Io {
            what: what.to_string(),
            source: Arc::new(source),
        }
    }

    pub(crate) fn http(context: impl fmt::Display, source: reqwest::Error) -> Error {
        Error::Http {
            context: context.to_string(),
            source: Arc::new(source.without_url()),
        }
    }

    pub(crate) fn manifest(msg: impl Into<String>) -> Error {
        Error::InvalidManifest(msg.into())
    }

    pub(crate) fn request(msg: impl Into<String>) -> Error {
        Error::InvalidRequest(msg.into())
    }

    /// True for errors a client caused with a bad request (HTTP 400 in the API): bad names,
    /// digests, Modelfiles or create parameters.
    pub fn is_bad_request(&self) -> bool {
        matches!(
            self,
            Error::InvalidName { .. }
                | Error::InvalidDigest(_)
                | Error::Modelfile(_)
                | Error::InvalidRequest(_)
                | Error::InsecureProtocol
        )
    }

    /// True when a model or blob does not exist (HTTP 404 in the API).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Error::ModelNotFound(_) | Error::BlobNotFound(_) | Error::RemoteNotFound(_)
        )
    }

    /// True when the disk is full: retrying cannot help until space is freed.
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::NoSpace { .. } => true,
            Error::Io { source, .. } => is_enospc(source),
            _ => false,
        }
    }
}

pub(crate) fn is_enospc(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

impl From<engine::Error> for Error {
    fn from(e: engine::Error) -> Self {
        Error::Gguf(Arc::new(e))
    }
}
