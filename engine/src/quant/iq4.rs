//! The non-linear 4-bit formats: IQ4_NL (32-element blocks, activations Q8_0) and IQ4_XS
//! (256-element super-blocks with 6-bit sub-block scales, activations Q8_K). Each quant indexes the
//! 16-entry table [`KVALUES_IQ4NL`].
//!
//! The quantizer is `quantize_row_iq4_nl_impl` as `llama-quantize` calls it through
//! `quantize_iq4_nl` / `quantize_iq4_xs` without an importance matrix (weights `x²`, 7 refinement
//! steps each way).

// Index loops are kept where ggml has them, so the code can be checked against it line by line.
#![allow(clippy::needless_range_loop)]

use super::blocks::{f32_to_f16, BlockIQ4_NL, BlockIQ4_XS, BlockQ8_0, BlockQ8_K, KVALUES_IQ4NL, QK, QK_K};
use super::search::{best_index_int8, nearest_int, GROUP_MAX_EPS};

const NTRY: i32 = 7;

#[inline]
fn kv(q: u8) -> f32 {
    f32::from(KVALUES_IQ4NL[q as usize])
}

pub(crate) fn dequantize_iq4_nl(blocks: &[BlockIQ4_NL], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK)) {
        let d = b.d();
        for j in 0..QK / 2 {
            y[j] = d * kv(b.qs[j] & 0xF);
            y[j + QK / 2] = d * kv(b.qs[j] >> 4);
        }
    }
}

pub(crate) fn dequantize_iq4_xs(blocks: &[BlockIQ4_XS], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = b.d();
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * (i32::from(b.scale(ib)) - 32) as f32;
            let qs = &b.qs[16 * ib..16 * ib + 16];
            for j in 0..16 {
                y[j] = dl * kv(qs[j] & 0xF);
                y[j + 16] = dl * kv(qs[j] >> 4);
            }
        }
    }
}

/// Σ w·q·x and Σ w·q² for the table levels nearest to `id·x`, optionally recording the indices.
#[inline]
fn fit(x: &[f32], weight: &[f32], id: f32, mut l_out: Option<&mut [u8]>) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for (j, (&v, &w)) in x.iter().zip(weight).enumerate() {
        let l = best_index_int8(&KVALUES_IQ4NL, id * v);
        if let Some(out) = l_out.as_deref_mut() {
            out[j] = l as u8;
        }
        let q = f32::from(KVALUES_IQ4NL[l]);
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The best scale for one 32-element sub-block: start from `max / 127`, then try the 15 inverse
/// scales `(itry - 127) / max`, keeping the one that maximises (Σwqx)² / Σwq². 0 for a zero block.
fn best_scale(x: &[f32], l: &mut [u8]) -> f32 {
    let weight: [f32; 32] = std::array::from_fn(|j| x[j] * x[j]);
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = f32::from(KVALUES_IQ4NL[0]);
    let d = -max / v0;
    let (sumqx, sumq2) = fit(x, &weight, 1.0 / d, Some(l));
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + i32::from(KVALUES_IQ4NL[0])) as f32 / max;
        let (sumqx, sumq2) = fit(x, &weight, id, None);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Places 32 indices per 16 bytes: element `j < 16` in the low nibble of byte `j`, `j + 16` high.
#[inline]
fn pack_nibbles(l: &[u8], qs: &mut [u8]) {
    for (c, qs) in l.chunks_exact(32).zip(qs.chunks_exact_mut(16)) {
        for j in 0..16 {
            qs[j] = c[j] | (c[j + 16] << 4);
        }
    }
}

/// `quantize_iq4_nl`: one scale per 32 elements, stored as f16; the indices are then recomputed
/// against the unrounded scale.
pub(crate) fn quantize_iq4_nl(x: &[f32], blocks: &mut [BlockIQ4_NL]) {
    for (x, b) in x.chunks_exact(QK).zip(blocks) {
        let mut l = [0u8; QK];
        let scale = best_scale(x, &mut l);
        b.d = f32_to_f16(scale);
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        for (l, &v) in l.iter_mut().zip(x) {
            *l = best_index_int8(&KVALUES_IQ4NL, id * v) as u8;
        }
        pack_nibbles(&l, &mut b.qs);
    }
}

/// `quantize_iq4_xs`: per 32 elements a scale as in IQ4_NL; the eight scales become signed 6-bit
/// multiples of `d = -max_scale / 32`, and the indices are recomputed against them.
pub(crate) fn quantize_iq4_xs(x: &[f32], blocks: &mut [BlockIQ4_XS]) {
    for (x, b) in x.chunks_exact(QK_K).zip(blocks) {
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; 8];
        let (mut max_scale, mut amax_scale) = (0f32, 0f32);
        for ib in 0..8 {
            let d = best_scale(&x[32 * ib..32 * ib + 32], &mut l[32 * ib..32 * ib + 32]);
            scales[ib] = d;
            if d.abs() > amax_scale {
                amax_scale = d.abs();
                max_scale = d;
            }
        }
        let d = -max_scale / 32.0;
        b.d = f32_to_f16(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        b.scales_l = [0; 4];
        for ib in 0..8 {
            let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in 32 * ib..32 * ib + 32 {
                l[j] = best_index_int8(&KVALUES_IQ4NL, idl * x[j]) as u8;
            }
            let ls = (ls + 32) as u8;
            b.scales_l[ib / 2] |= (ls & 0xF) << (4 * (ib % 2));
            scales_h |= u16::from(ls >> 4) << (2 * ib);
        }
        b.scales_h = scales_h.to_le_bytes();
        pack_nibbles(&l, &mut b.qs);
    }
}

/// IQ4_NL · Q8_0: per block the exact Σ q8·kvalue, scaled by `d_x·d_w`.
pub(crate) fn dot_iq4_nl_q8_0(x: &[BlockIQ4_NL], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let mut sumi = 0i32;
        for j in 0..QK / 2 {
            sumi += i32::from(y.qs[j]) * i32::from(KVALUES_IQ4NL[(x.qs[j] & 0xF) as usize]);
            sumi += i32::from(y.qs[j + QK / 2]) * i32::from(KVALUES_IQ4NL[(x.qs[j] >> 4) as usize]);
        }
        sumf += (y.d() * x.d()) * sumi as f32;
    }
    sumf
}

/// IQ4_XS · Q8_K: per super-block the exact Σ over sub-blocks of (ls - 32)·Σ q8·kvalue, scaled
/// once by `d_w·d_x`.
pub(crate) fn dot_iq4_xs_q8_k(x: &[BlockIQ4_XS], y: &[BlockQ8_K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let mut isum = 0i32;
        for ib in 0..8 {
            let qs = &x.qs[16 * ib..16 * ib + 16];
            let q8 = &y.qs[32 * ib..32 * ib + 32];
            let mut sumi = 0i32;
            for j in 0..16 {
                sumi += i32::from(q8[j]) * i32::from(KVALUES_IQ4NL[(qs[j] & 0xF) as usize]);
                sumi += i32::from(q8[j + 16]) * i32::from(KVALUES_IQ4NL[(qs[j] >> 4) as usize]);
            }
            isum += (i32::from(x.scale(ib)) - 32) * sumi;
        }
        sumf += (x.d() * y.d()) * isum as f32;
    }
    sumf
}
