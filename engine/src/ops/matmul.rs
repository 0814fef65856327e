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
    /// Unless the part's packed rows are whole groups: each end of `rows` is a multiple of 16 or
    /// past the packed rows ([`kernels::packed`]).
    pub fn rows(&self, rows: Range<usize>) -> WeightView<'a> {
        assert!(rows.start <= rows.end && rows.end <= self.n_out);
        assert!(
            kernels::packed::whole_groups(&rows, self.packed_rows),
            "rows {rows:?} split a packed group"
        );
        WeightView {
            n_out: rows.len(),
            data: &self.data[rows.start * self.row_bytes..rows.end * self.row_bytes],
            packed_rows: self.packed_rows.clamp(rows.start, rows.end) - rows.start,
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

/// Rows of activations one task of a parallel row-wise step converts (a decode step's single
/// row is converted on the calling thread, without a step).
pub const ROWS_PER_TASK: usize = 4;

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

    /// Activations whose rows are finished in place by `fill(t, row)` (row `t` of `buf`, as the
    /// caller left it: a norm written there, or an activation function applied to it) and
    /// converted to the dot formats of every matrix in `ws`, in one parallel step: each row is
    /// converted right after it is written, while it is in cache, and no pass over the rows runs
    /// on one thread. The bytes are those of filling `buf` row by row, then [`Activations::new`].
    pub fn from_rows(
        buf: &'a mut [f32],
        n: usize,
        ws: &[WeightView],
        fill: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Self {
        assert!(
            n > 0 && buf.len().is_multiple_of(n),
            "activations of {} values in rows of {n}",
            buf.len()
        );
        let n_tokens = buf.len() / n;
        let mut converted: Vec<(GgmlType, Vec<u8>)> = Vec::new();
        let mut dsts: Vec<(GgmlType, usize, SendPtr<u8>)> = Vec::new();
        for w in ws {
            assert_eq!(w.n_in, n, "activations: row length vs weight row length");
            let ty = vec_dot_type(w.ty);
            if converted.iter().all(|(t, _)| *t != ty) {
                let row_bytes = ty.row_bytes(n as u64).expect("checked by WeightView") as usize;
                converted.push((ty, vec![0u8; row_bytes * n_tokens]));
                let b = &mut converted.last_mut().expect("just pushed").1;
                dsts.push((ty, row_bytes, SendPtr(b.as_mut_ptr())));
            }
        }
        let rows = SendPtr(buf.as_mut_ptr());
        threads::with_current(|pool| {
            pool.for_each_chunk(n_tokens, ROWS_PER_TASK, |ts| {
                for t in ts {
                    // SAFETY: row `t` of `buf` and of each conversion is written by the one task
                    // that owns token `t`; the buffers outlive the step.
                    let row = unsafe { std::slice::from_raw_parts_mut(rows.get().add(t * n), n) };
                    fill(t, row);
                    for &(ty, rb, d) in &dsts {
                        let d = unsafe { std::slice::from_raw_parts_mut(d.get().add(t * rb), rb) };
                        quantize_row(ty, row, d);
                    }
                }
            })
        });
        Activations { x: buf, n, converted }
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
                    pool.for_each_chunk(n_tokens, ROWS_PER_TASK, |rows| {
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
struct SendPtr<T>(*mut T);
// SAFETY: used only to write disjoint rows from different tasks (see `Activations::convert`).
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}

impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::norm::rms_norm;
    use crate::threads::ThreadPool;

    fn random(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Rows normalized and converted in one parallel step give the same conversions, and the
    /// same products bit for bit, as normalizing first and converting in `matmul`, for every
    /// activation format (Q8_0, Q8_1, Q8_K, F32) and for batches that are one row (inline) or
    /// several tasks of rows.
    #[test]
    fn rows_filled_and_converted_in_one_step_match_convert_after() {
        let pool = ThreadPool::new(3).unwrap();
        let mut seed = 5;
        let n = 256;
        let types = [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::F32];
        let data: Vec<Vec<u8>> = types
            .iter()
            .map(|&ty| {
                let w = random(&mut seed, n * 8);
                let mut d = vec![0u8; ty.row_bytes(n as u64).unwrap() as usize * 8];
                crate::quant::quantize_row(ty, &w, &mut d).unwrap();
                d
            })
            .collect();
        let ws: Vec<WeightView> = types
            .iter()
            .zip(&data)
            .map(|(&ty, d)| WeightView::new(ty, n, 8, d).unwrap())
            .collect();
        let norm = random(&mut seed, n);
        pool.install(|| {
            for n_tokens in [1, 2 * ROWS_PER_TASK + 1] {
                let x = random(&mut seed, n_tokens * n);
                let mut h = vec![0f32; n_tokens * n];
                rms_norm(&x, &norm, 1e-6, &mut h);
                let mut want = Activations::new(&h, n);
                let mut buf = vec![f32::NAN; n_tokens * n];
                let mut got = Activations::from_rows(&mut buf, n, &ws, |t, row| {
                    rms_norm(&x[t * n..(t + 1) * n], &norm, 1e-6, row)
                });
                assert_eq!(got.x, want.x);
                for w in &ws {
                    let mut a = vec![0f32; n_tokens * 8];
                    let mut b = vec![1f32; n_tokens * 8];
                    matmul(w, &mut want, &mut a);
                    matmul(w, &mut got, &mut b);
                    assert_eq!(
                        want.get(vec_dot_type(w.ty)),
                        got.get(vec_dot_type(w.ty)),
                        "{}",
                        w.ty
                    );
                    assert!(
                        a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{}",
                        w.ty
                    );
                }
                assert_eq!(got.converted.len(), types.len(), "one conversion per format");
            }
        });
    }

    /// A row range of a packed matrix that starts and ends on groups (a part of phi3's fused
    /// Q/K/V) is a packed matrix of its own: its rows and its products are the whole matrix's.
    #[test]
    fn parts_of_a_packed_matrix_keep_its_rows_and_products() {
        let ty = GgmlType::Q4_0;
        let (n, rows) = (64, 56); // three packed groups and a row-major tail of 8
        if !kernels::matmul::can_use_packed(Isa::active(), ty) {
            return;
        }
        let mut seed = 9;
        let w = random(&mut seed, n * rows);
        let mut data = vec![0u8; ty.row_bytes(n as u64).unwrap() as usize * rows];
        crate::quant::quantize_row(ty, &w, &mut data).unwrap();
        let file = WeightView::new(ty, n, rows, &data).unwrap();
        let mut packed = data.clone();
        kernels::packed::pack_in_place(ty, n, &mut packed, 48, &mut Vec::new());
        let whole = WeightView::new(ty, n, rows, &packed)
            .unwrap()
            .with_packed_rows(48);
        let x = random(&mut seed, 3 * n);
        let mut all = vec![0f32; 3 * rows];
        matmul(&whole, &mut Activations::new(&x, n), &mut all);
        for (part, packed_rows) in [(0..16, 16), (16..48, 32), (32..56, 16), (48..56, 0), (16..56, 32)] {
            let v = whole.rows(part.clone());
            assert_eq!(v.packed_rows, packed_rows, "{part:?}");
            let (mut got, mut want) = (vec![0f32; n], vec![0f32; n]);
            for r in 0..part.len() {
                v.dequantize_row(r, &mut got);
                file.dequantize_row(part.start + r, &mut want);
                assert_eq!(got, want, "{part:?} row {r}");
            }
            let mut out = vec![0f32; 3 * part.len()];
            matmul(&v, &mut Activations::new(&x, n), &mut out);
            for t in 0..3 {
                let want = &all[t * rows + part.start..t * rows + part.end];
                let got = &out[t * part.len()..(t + 1) * part.len()];
                assert!(
                    got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{part:?} token {t}"
                );
            }
        }
        let split = std::panic::catch_unwind(|| whole.rows(8..24));
        assert!(split.is_err(), "a part that splits a packed group");
    }
}
