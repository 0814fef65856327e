//! GGUF: reading (mmap, zero-copy tensor data, split sets) and writing.

mod file;
mod reader;
mod value;
mod writer;

pub use file::{
    split_path, Gguf, GgufFile, ModelFileType, Tensor, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT,
};
pub use reader::{
    parse, tensor_size, Header, TensorInfo, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_HEADER_MEMORY,
    MAX_NAME,
};
pub use value::{Array, Metadata, Strings, Value, ValueType};
pub use writer::{GgufWriter, SplitBy, TensorData, TensorSpec};
