//! The legacy 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! Quantizers are llama.cpp's reference ones (`quantize_row_*_ref` in `ggml-quants.c`), which is
//! what `llama-quantize` writes without an importance matrix: same float operations in the same
//! order, so the same bytes. Dot products follow ggml's `ggml_vec_dot_*_q8_*`: an exact i32 dot
//! product of the quants per block, then scaled.

// Index loops are kept where ggml has them, so the code can be checked against it line by line.
#![allow(clippy::needless_range_loop)]

use super::blocks::{f32_to_f16, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK};

// ---------------------------------------------------------------------------------------------
// Dequantization
// ---------------------------------------------------------------------------------------------

pub(crate) fn dequantize_q4_0(blocks: &[BlockQ4_0], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK)) {
        let d = b.d();
        for j in 0..QK / 2 {
            y[j] = ((b.qs[j] & 0xF) as i32 - 8) as f32 * d;
            y[j + QK / 2] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
        }
    }
}

pub(crate) fn dequantize_q4_1(blocks: &[BlockQ4_1], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK)) {
        let (d, m) = (b.d(), b.m());
        for j in 0..QK / 2 {
            y[j] = (b.qs[j] & 0xF) as f32 * d + m;
            y[j + QK / 2] = (b.qs[j] >> 4) as f32 * d + m;
        }
    }
}

/// The 5-bit values of a Q5_0/Q5_1 block, 0..32, in element order.
#[inline]
fn q5_values(qs: &[u8; 16], qh: u32) -> [u8; QK] {
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        q[j] = (qs[j] & 0xF) | (h0 << 4);
        q[j + QK / 2] = (qs[j] >> 4) | (h1 << 4);
    }
    q
}

pub(crate) fn dequantize_q5_0(blocks: &[BlockQ5_0], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK)) {
        let d = b.d();
        for (y, q) in y.iter_mut().zip(q5_values(&b.qs, b.qh())) {
            *y = (q as i32 - 16) as f32 * d;
        }
    }
}

pub(crate) fn dequantize_q5_1(blocks: &[BlockQ5_1], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK)) {
        let (d, m) = (b.d(), b.m());
        for (y, q) in y.iter_mut().zip(q5_values(&b.qs, b.qh())) {
            *y = q as f32 * d + m;
        }
    }
}

pub(crate) fn dequantize_q8_0(blocks: &[BlockQ8_0], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK)) {
        let d = b.d();
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = q as f32 * d;
        }
    }
}

pub(crate) fn dequantize_q8_1(blocks: &[BlockQ8_1], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK)) {
        let d = b.d();
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = q as f32 * d;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reference quantizers
// ---------------------------------------------------------------------------------------------

/// The element of largest magnitude, with its sign (the first one on ties), and that magnitude.
#[inline]
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline]
fn recip_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// `quantize_row_q4_0_ref`: the scale maps the element of largest magnitude to -8 exactly; quants
/// are `x/d + 8.5` truncated (so rounding half up), capped at 15.
pub(crate) fn quantize_q4_0(x: &[f32], blocks: &mut [BlockQ4_0]) {
    for (x, b) in x.chunks_exact(QK).zip(blocks) {
        let (max, _) = signed_absmax(x);
        let d = max / -8.0;
        let id = recip_or_zero(d);
        b.d = f32_to_f16(d);
        for j in 0..QK / 2 {
            let x0 = x[j] * id;
            let x1 = x[j + QK / 2] * id;
            let q0 = ((x0 + 8.5) as i8).min(15) as u8;
            let q1 = ((x1 + 8.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// `quantize_row_q4_1_ref`: `m` is the block minimum and `d = (max - min) / 15`.
pub(crate) fn quantize_q4_1(x: &[f32], blocks: &mut [BlockQ4_1]) {
    for (x, b) in x.chunks_exact(QK).zip(blocks) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = recip_or_zero(d);
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(min);
        for j in 0..QK / 2 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[j + QK / 2] - min) * id;
            let q0 = ((x0 + 0.5) as i8).min(15) as u8;
            let q1 = ((x1 + 0.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// Splits 32 five-bit values into Q5 nibbles and the 32 high bits.
#[inline]
fn pack_q5(q: &[u8; QK]) -> ([u8; 16], [u8; 4]) {
    let mut qs = [0u8; 16];
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (q0, q1) = (q[j], q[j + QK / 2]);
        qs[j] = (q0 & 0xF) | ((q1 & 0xF) << 4);
        qh |= u32::from((q0 & 0x10) >> 4) << j;
        qh |= u32::from((q1 & 0x10) >> 4) << (j + QK / 2);
    }
    (qs, qh.to_le_bytes())
}

/// `quantize_row_q5_0_ref`: like Q4_0 with 32 levels (`d = max / -16`).
pub(crate) fn quantize_q5_0(x: &[f32], blocks: &mut [BlockQ5_0]) {
    for (x, b) in x.chunks_exact(QK).zip(blocks) {
        let (max, _) = signed_absmax(x);
        let d = max / -16.0;
        let id = recip_or_zero(d);
        b.d = f32_to_f16(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = ((v * id + 16.5) as i8).min(31) as u8;
        }
        (b.qs, b.qh) = pack_q5(&q);
    }
}

/// `quantize_row_q5_1_ref`: like Q4_1 with 32 levels (and no cap: `x/d + 0.5` never reaches 32).
pub(crate) fn quantize_q5_1(x: &[f32], blocks: &mut [BlockQ5_1]) {
    for (x, b) in x.chunks_exact(QK).zip(blocks) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = recip_or_zero(d);
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(min);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = ((v - min) * id + 0.5) as u8;
        }
        (b.qs, b.qh) = pack_q5(&q);
    }
}

#[inline]
fn absmax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |a, &v| if a > v.abs() { a } else { v.abs() })
}

/// `quantize_row_q8_0_ref`: `d = absmax / 127`, quants `round(x / d)` (half away from zero).
pub(crate) fn quantize_q8_0(x: &[f32], blocks: &mut [BlockQ8_0]) {
    for (x, b) in x.chunks_exact(QK).zip(blocks) {
        let d = absmax(x) / 127.0;
        let id = recip_or_zero(d);
        b.d = f32_to_f16(d);
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
        }
    }
}

/// `quantize_row_q8_1_ref`: Q8_0 plus `s = d * Σ q`.
pub(crate) fn quantize_q8_1(x: &[f32], blocks: &mut [BlockQ8_1]) {
    for (x, b) in x.chunks_exact(QK).zip(blocks) {
        let d = absmax(x) / 127.0;
        let id = recip_or_zero(d);
        b.d = f32_to_f16(d);
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
            sum += i32::from(*q);
        }
        b.s = f32_to_f16(sum as f32 * d);
    }
}

/// The activation quantizer llama.cpp's CPU backend runs for Q8_0 on x86 (AVX/AVX2/AVX-512) and
/// ARM (`quantize_row_q8_0` in `ggml-cpu/arch/*/quants.c`): unlike the reference it multiplies by
/// `127 / absmax` and rounds halves to even.
pub(crate) fn quantize_q8_0_simd_rounding(x: &[f32], blocks: &mut [BlockQ8_0]) {
    for (x, b) in x.chunks_exact(QK).zip(blocks) {
        let amax = absmax(x);
        b.d = f32_to_f16(amax / 127.0);
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round_ties_even() as i8;
        }
    }
}

/// Q8_1 counterpart of [`quantize_q8_0_simd_rounding`] (`s = d * Σ q`).
pub(crate) fn quantize_q8_1_simd_rounding(x: &[f32], blocks: &mut [BlockQ8_1]) {
    for (x, b) in x.chunks_exact(QK).zip(blocks) {
        let amax = absmax(x);
        let d = amax / 127.0;
        b.d = f32_to_f16(d);
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round_ties_even() as i8;
            sum += i32::from(*q);
        }
        b.s = f32_to_f16(d * sum as f32);
    }
}

// ---------------------------------------------------------------------------------------------
// Dot products with quantized activations
// ---------------------------------------------------------------------------------------------
//
// Per block: `sumi` is the exact integer dot product of the weight quants (with their offset, -8
// or -16, applied) and the activation quants; the block adds `(d_w * d_x) * sumi` to an f32 sum
// (plus `m_w * s_x` for the formats with a minimum). Blocks are summed in order.

/// Q4_0 · Q8_0.
pub(crate) fn dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            sumi += ((x.qs[j] & 0xF) as i32 - 8) * i32::from(y.qs[j]);
            sumi += ((x.qs[j] >> 4) as i32 - 8) * i32::from(y.qs[j + QK / 2]);
        }
        sumf += (x.d() * y.d()) * sumi as f32;
    }
    sumf
}

/// Q4_1 · Q8_1: `Σ (d q + m) · d_y q_y = d d_y Σ q q_y + m · s_y`.
pub(crate) fn dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            sumi += (x.qs[j] & 0xF) as i32 * i32::from(y.qs[j]);
            sumi += (x.qs[j] >> 4) as i32 * i32::from(y.qs[j + QK / 2]);
        }
        sumf += (x.d() * y.d()) * sumi as f32 + x.m() * y.s();
    }
    sumf
}

/// Q5_0 · Q8_0.
pub(crate) fn dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let q = q5_values(&x.qs, x.qh());
        let sumi: i32 = q
            .iter()
            .zip(&y.qs)
            .map(|(&q, &v)| (q as i32 - 16) * i32::from(v))
            .sum();
        sumf += (x.d() * y.d()) * sumi as f32;
    }
    sumf
}

/// Q5_1 · Q8_1.
pub(crate) fn dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let q = q5_values(&x.qs, x.qh());
        let sumi: i32 = q.iter().zip(&y.qs).map(|(&q, &v)| q as i32 * i32::from(v)).sum();
        sumf += (x.d() * y.d()) * sumi as f32 + x.m() * y.s();
    }
    sumf
}

/// Q8_0 · Q8_0.
pub(crate) fn dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let sumi: i32 =
            x.qs.iter()
                .zip(&y.qs)
                .map(|(&a, &b)| i32::from(a) * i32::from(b))
                .sum();
        sumf += (x.d() * y.d()) * sumi as f32;
    }
    sumf
}
