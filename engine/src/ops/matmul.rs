//! Matrix multiplication of weights in their file format with a batch of f32 activations.
//!
//! Computed the way llama.cpp's CPU backend does: each activation row is converted once to the
//! weight type's `vec_dot_type` (F16 for F16 weights, Q8_0 / Q8_K blocks for quantized ones) and
//! dotted with every weight row, so our results carry the same roundings as the reference logits.
//! The products are [`kernels::matmul`]'s (row kernels for decode, panel GEMM for batches) on the
//! engine's persistent thread pool.

use std::ops::Range;

use super::dot::{self, dequantize_row, quantize_row, vec_dot_type};
use crate::kernels::matmul::{Matrix, Product};
use crate::kernels::{self, Isa};
use crate::quant::GgmlType;
use crate::threads;
use crate::{Error, Result};

/// A 2-D weight matrix in its own format: `n_out` rows of `n_in` elements (ggml `ne = [n_in, n_out]`).
#[derive(Clone, Copy, Debug)]
pub struct WeightView<'a> {
    ty: GgmlType,
    n_in: usize,
    n_out: usize,
    row_bytes: usize,
    data: &'a [u8],
    /// The first rows, a multiple of 16, are in the packed layout of [`kernels::packed`].
    packed_rows: usize,
}

impl<'a> WeightView<'a> {
    pub fn new(ty: GgmlType, n_in: usize, n_out: usize, data: &'a [u8]) -> Result<Self> {
        let bad = |msg: String| Error::InvalidArgument(format!("weight view: {msg}"));
        if !dot::can_multiply(ty) {
            return Err(bad(format!("type {ty} has no kernels")));
        }
        let row_bytes = ty
            .row_bytes(n_in as u64)
            .ok_or_else(|| bad(format!("{n_in} is not a whole number of {ty} blocks")))?
            as usize;
        if row_bytes.checked_mul(n_out) != Some(data.len()) {
            return Err(bad(format!(
                "{} bytes for {n_out} rows of {n_in} {ty} values",
                data.len()
            )));
        }
        Ok(WeightView {
            ty,
            n_in,
            n_out,
            row_bytes,
            data,
            packed_rows: 0,
        })
    }

    /// The same matrix, whose first `rows` rows were packed at load ([`kernels::packed`]).
    ///
    /// # Panics
    /// Unless `rows` is a whole number of 16-row groups within the matrix and the tier in use
    /// has packed kernels for the type.
    pub fn with_packed_rows(self, rows: usize) -> WeightView<'a> {
        assert!(rows.is_multiple_of(kernels::packed::GROUP) && rows <= self.n_out);
        assert!(rows == 0 || kernels::matmul::can_use_packed(Isa::active(), self.ty));
        WeightView {
            packed_rows: rows,
            ..self
        }
    }

    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    pub fn n_out(&self) -> usize {
        self.n_out
    }

    /// The sub-matrix of rows `rows` (a part of a fused tensor such as phi3's `attn_qkv`).
    ///
    /// # Panics
    /// On a packed matrix unless `rows` is all of it.
    pub fn rows(&self, rows: Range<usize>) -> WeightView<'a> {
        assert!(rows.start <= rows.end && rows.end <= self.n_out);
        if rows == (0..self.n_out) {
            return *self;
        }
        assert_eq!(self.packed_rows, 0, "a part of a packed matrix");
        WeightView {
            n_out: rows.len(),
            data: &self.data[rows.start * self.row_bytes..rows.end * self.row_bytes],
            ..*self
        }
    }

    /// Row `r` converted to f32 (token embedding lookup reads only the rows it needs).
    ///
    /// # Panics
    /// If the type cannot be dequantized ([`dot::can_dequantize`], checked at load).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.n_in);
        let rb = self.row_bytes;
        if r < self.packed_rows {
            let g = kernels::packed::GROUP;
            let group = &self.data[r / g * g * rb..(r / g + 1) * g * rb];
            let mut row = vec![0u8; rb];
            kernels::packed::unpack_row(self.ty, self.n_in, group, r % g, &mut row);
            dequantize_row(self.ty, &row, out);
        } else {
            dequantize_row(self.ty, &self.data[r * rb..(r + 1) * rb], out);
        }
    }
}

/// A batch of activation rows (`n_tokens` rows of `n` values) together with their conversions to
/// the weights' dot-product formats, made once and reused by every matmul that reads them (Q, K
/// and V share one input; so do the FFN's gate and up).
pub struct Activations<'a> {
    x: &'a [f32],
    n: usize,
    converted: Vec<(GgmlType, Vec<u8>)>,
}

impl<'a> Activations<'a> {
    pub fn new(x: &'a [f32], n: usize) -> Self {
        assert!(
            n > 0 && x.len().is_multiple_of(n),
            "activations of {} values in rows of {n}",
            x.len()
        );
        Activations {
            x,
            n,
            converted: Vec::new(),
        }
    }

    pub fn n_tokens(&self) -> usize {
        self.x.len() / self.n
    }

    /// The rows converted to `ty` by an earlier [`Activations::convert`].
    fn get(&self, ty: GgmlType) -> &[u8] {
        let i = self.converted.iter().position(|(t, _)| *t == ty);
        &self.converted[i.expect("converted before use")].1
    }

    /// Converts the rows to `ty` unless done already; returns the index in `converted`.
    fn convert(&mut self, ty: GgmlType) -> usize {
        match self.converted.iter().position(|(t, _)| *t == ty) {
            Some(i) => i,
            None => {
                let row_bytes = ty.row_bytes(self.n as u64).expect("checked by WeightView") as usize;
                let n_tokens = self.n_tokens();
                let mut buf = vec![0u8; row_bytes * n_tokens];
                let (x, n) = (self.x, self.n);
                let dst = SendPtr(buf.as_mut_ptr());
                threads::with_current(|pool| {
                    pool.for_each_chunk(n_tokens, 4, |rows| {
                        for t in rows {
                            // SAFETY: each row of `buf` is written by the one task that owns
                            // token `t`, and `buf` outlives the step.
                            let d = unsafe {
                                std::slice::from_raw_parts_mut(dst.get().add(t * row_bytes), row_bytes)
                            };
                            quantize_row(ty, &x[t * n..(t + 1) * n], d);
                        }
                    })
                });
                self.converted.push((ty, buf));
                self.converted.len() - 1
            }
        }
    }
}

/// `out[t][r] = dot(w.row(r), x[t])` for every token `t` and output row `r`; `out` is
/// `n_tokens × n_out`, row-major. Runs on the current [`crate::threads`] pool.
pub fn matmul(w: &WeightView, x: &mut Activations, out: &mut [f32]) {
    matmul_many(&[*w], x, &mut [out]);
}

/// [`matmul`] of several weight matrices with the same activations (Q, K and V; gate and up),
/// in one parallel step where the kernels allow it (see [`kernels::matmul::matmul_many`]).
///
/// # Panics
/// If more than [`kernels::matmul::MAX_FUSED`] matrices are given.
pub fn matmul_many(ws: &[WeightView], x: &mut Activations, outs: &mut [&mut [f32]]) {
    assert_eq!(ws.len(), outs.len(), "matmul: one output per weight matrix");
    let n_tokens = x.n_tokens();
    for (w, out) in ws.iter().zip(outs.iter()) {
        assert_eq!(x.n, w.n_in, "matmul: activation width vs weight row length");
        assert_eq!(out.len(), n_tokens * w.n_out, "matmul: output size");
        x.convert(vec_dot_type(w.ty));
    }
    let x = &*x;
    let mut products: Vec<Product> = ws
        .iter()
        .zip(outs.iter_mut())
        .map(|(w, out)| Product {
            w: Matrix {
                ty: w.ty,
                n: w.n_in,
                n_out: w.n_out,
                row_bytes: w.row_bytes,
                data: w.data,
                packed_rows: w.packed_rows,
            },
            xq: x.get(vec_dot_type(w.ty)),
            out,
        })
        .collect();
    threads::with_current(|pool| kernels::matmul::matmul_many(pool, Isa::active(), n_tokens, &mut products));
}

/// A pointer that tasks writing disjoint parts of one buffer can share.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: used only to write disjoint rows from different tasks (see `Activations::converted`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut u8 {
        self.0
    }
}
