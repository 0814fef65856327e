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
    /// An error about the contents of a file, with the file it is about.
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<Error>,
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
    /// A batch does not fit in the KV cache (or in its sequence's share of it).
    #[error("KV cache full: {0}")]
    KvCacheFull(String),
    /// A chat template that does not parse, or fails while rendering (including a template's own
    /// `raise_exception`).
    #[error("template: {0}")]
    Template(String),
    /// The runner stopped (its model was unloaded, or the server is shutting down) before the
    /// request ended.
    #[error("{0}")]
    Stopped(String),
    /// A grammar or JSON schema that cannot be used, or a token it does not allow.
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
}

impl Error {
    pub(crate) fn corrupt(offset: u64, msg: impl Into<String>) -> Self {
        Error::Corrupt {
            offset,
            msg: msg.into(),
        }
    }

    /// Says which file an error about a file's contents is about (I/O errors already do).
    pub(crate) fn in_file(self, path: impl Into<PathBuf>) -> Self {
        match self {
            e @ (Error::Io { .. } | Error::InFile { .. }) => e,
            e => Error::InFile {
                path: path.into(),
                source: Box::new(e),
            },
        }
    }

    /// The error itself, without the file it is about.
    pub fn without_path(&self) -> &Error {
        match self {
            Error::InFile { source, .. } => source.without_path(),
            e => e,
        }
    }

    /// Names the tensor in an error from a row-level function (e.g. `quant::dequantize_row`), which
    /// leaves the name empty because it does not know it.
    pub fn for_tensor(self, name: &str) -> Self {
        match self {
            Error::UnsupportedType { tensor, ty } if tensor.is_empty() => Error::UnsupportedType {
                tensor: name.to_string(),
                ty,
            },
            Error::BadTensor { tensor, msg } if tensor.is_empty() => Error::BadTensor {
                tensor: name.to_string(),
                msg,
            },
            e => e,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
