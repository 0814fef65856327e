//! Model names, digests, the content-addressed blob store and manifests, the Modelfile, create,
//! pull and push. Knows nothing of inference: it moves and verifies bytes and names.

pub mod digest;
pub mod error;
mod fsutil;
mod gojson;
pub mod manifest;
pub mod modelfile;
pub mod name;
pub mod store;

pub use digest::Digest;
pub use error::{Error, Result};
pub use manifest::{Layer, Manifest, ModelConfig};
pub use name::Name;
pub use store::Store;
