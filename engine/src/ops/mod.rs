//! The numeric operations of a forward pass, on plain f32 rows and on weights in their file format.
//!
//! Everything here is free of model knowledge: the model code (`crate::model`) composes these ops.
//! The hot ones (`matmul`, `attention`) have one entry point each, so that faster internals
//! (SIMD kernels, a custom thread pool, repacked weights) can replace the present ones without
//! touching the model code.

pub mod act;
pub mod attention;
pub(crate) mod dot;
pub mod matmul;
pub mod norm;
pub mod rope;

pub use matmul::{matmul, Activations, WeightView};
