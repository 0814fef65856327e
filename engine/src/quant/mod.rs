//! Tensor element types and their block formats.

mod ftype;
mod types;

pub use ftype::FileType;
pub use types::GgmlType;
