//! GGUF: reading (mmap, zero-copy tensor data, split sets) and writing.

mod file;
mod reader;
mod value;
mod writer;

pub use file::{split_path, Gguf, GgufFile, Tensor};
pub use reader::{parse, Header, TensorInfo, DEFAULT_ALIGNMENT, MAX_METADATA_VALUES};
pub use value::{Metadata, Value, ValueType};
pub use writer::{GgufWriter, TensorSpec};
