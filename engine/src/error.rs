//! The engine's one error type.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not a GGUF file we can read at all (wrong magic, v1, GGML/GGJT, big-endian, future versions).
    #[error("unsupported format: {0}")]
    UnsupportedFormat(String),
    /// A GGUF file whose contents are inconsistent; `offset` is the byte where the problem was found.
    #[error("corrupt GGUF at byte {offset}: {msg}")]
    Corrupt { offset: u64, msg: String },
    /// A split set whose parts do not fit together.
    #[error("split GGUF: {0}")]
    Split(String),
    #[error("missing metadata key '{0}'")]
    MissingKey(String),
    #[error("metadata key '{key}': {msg}")]
    BadKey { key: String, msg: String },
    #[error("missing tensor '{0}'")]
    MissingTensor(String),
    /// A tensor whose type is known to GGUF but that this engine cannot compute with.
    #[error("tensor '{tensor}' has type {ty}, which ollamars does not support")]
    UnsupportedType { tensor: String, ty: String },
    #[error("tensor '{tensor}': {msg}")]
    BadTensor { tensor: String, msg: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    pub(crate) fn corrupt(offset: u64, msg: impl Into<String>) -> Self {
        Error::Corrupt {
            offset,
            msg: msg.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
