//! The K-quants: 256-element super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, and the Q8_K activations
//! they (and IQ4_XS) are multiplied with.
//!
//! Quantizers are llama.cpp's reference ones (`quantize_row_q*_K_ref`), which `llama-quantize` runs
//! when there is no importance matrix. Each first fits every sub-block on its own (the searches in
//! [`super::search`]), then quantizes the sub-block scales (and mins) against one f16 super-block
//! scale, then requantizes the elements with the scales as stored. Dot products follow
//! `ggml_vec_dot_q*_K_q8_K`: exact integer sums per super-block, scaled once.

// Index loops are kept where ggml has them, so the code can be checked against it line by line.
#![allow(clippy::needless_range_loop)]

use super::blocks::{
    f32_to_f16, q3_k_scales, scale_min_k4, BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_K,
    QK_K,
};
use super::search::{
    make_q3_quants, make_qkx2_quants, make_qx_quants, nearest_int, Qkx2Search, GROUP_MAX_EPS,
};

// ---------------------------------------------------------------------------------------------
// Element walks shared by dequantization, quantization and dot products
// ---------------------------------------------------------------------------------------------

/// The 2-bit fields of Q2_K/Q3_K `qs`, in element order: element `128h + 32j + k` is bits `2j..2j+2`
/// of `qs[32h + k]`.
#[inline]
fn unpack_2bit(qs: &[u8; 64]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for h in 0..2 {
        for j in 0..4 {
            for k in 0..32 {
                q[128 * h + 32 * j + k] = (qs[32 * h + k] >> (2 * j)) & 3;
            }
        }
    }
    q
}

/// Inverse of [`unpack_2bit`].
#[inline]
fn pack_2bit(l: &[u8; QK_K]) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for h in 0..2 {
        for k in 0..32 {
            let e = 128 * h + k;
            qs[32 * h + k] = l[e] | (l[e + 32] << 2) | (l[e + 64] << 4) | (l[e + 96] << 6);
        }
    }
    qs
}

/// Q3_K values in -4..=3, element order.
#[inline]
fn q3_k_values(b: &BlockQ3_K) -> [i8; QK_K] {
    let low = unpack_2bit(&b.qs);
    let mut q = [0i8; QK_K];
    for (e, q) in q.iter_mut().enumerate() {
        let high = (b.hmask[e % 32] >> (e / 32)) & 1;
        *q = low[e] as i8 - if high == 1 { 0 } else { 4 };
    }
    q
}

/// Q4_K nibbles (0..16) in element order: element `64c + 32k + l` is nibble `k` of `qs[32c + l]`.
#[inline]
fn q4_k_values(qs: &[u8; 128]) -> [u8; QK_K] {
    let mut q = [0u8; QK_K];
    for c in 0..4 {
        for l in 0..32 {
            q[64 * c + l] = qs[32 * c + l] & 0xF;
            q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    }
    q
}

/// Q5_K values (0..32) in element order: Q4_K's nibble plus 16 if bit `e / 32` of `qh[e % 32]`.
#[inline]
fn q5_k_values(b: &BlockQ5_K) -> [u8; QK_K] {
    let mut q = q4_k_values(&b.qs);
    for (e, q) in q.iter_mut().enumerate() {
        *q |= ((b.qh[e % 32] >> (e / 32)) & 1) << 4;
    }
    q
}

/// Q6_K values (-32..32) in element order.
#[inline]
fn q6_k_values(b: &BlockQ6_K) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for h in 0..2 {
        let ql = &b.ql[64 * h..64 * h + 64];
        let qh = &b.qh[32 * h..32 * h + 32];
        for l in 0..32 {
            let y = &mut q[128 * h..128 * h + 128];
            y[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
            y[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            y[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            y[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    q
}

/// The 8 (scale, min) pairs of a Q4_K/Q5_K block.
#[inline]
fn scales_mins_k4(scales: &[u8; 12]) -> [(u8, u8); 8] {
    std::array::from_fn(|j| scale_min_k4(j, scales))
}

// ---------------------------------------------------------------------------------------------
// Dequantization
// ---------------------------------------------------------------------------------------------

pub(crate) fn dequantize_q2_k(blocks: &[BlockQ2_K], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d(), b.dmin());
        let q = unpack_2bit(&b.qs);
        for (s, y) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * (b.scales[s] & 0xF) as f32;
            let ml = min * (b.scales[s] >> 4) as f32;
            for (y, &q) in y.iter_mut().zip(&q[16 * s..]) {
                *y = dl * q as f32 - ml;
            }
        }
    }
}

pub(crate) fn dequantize_q3_k(blocks: &[BlockQ3_K], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = b.d();
        let sc = q3_k_scales(&b.scales);
        let q = q3_k_values(b);
        for (s, y) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * sc[s] as f32;
            for (y, &q) in y.iter_mut().zip(&q[16 * s..]) {
                *y = dl * q as f32;
            }
        }
    }
}

fn dequantize_k4(d: f32, dmin: f32, scales: &[u8; 12], q: &[u8; QK_K], y: &mut [f32]) {
    for (s, (sc, m)) in scales_mins_k4(scales).into_iter().enumerate() {
        let d1 = d * sc as f32;
        let m1 = dmin * m as f32;
        for (y, &q) in y[32 * s..32 * s + 32].iter_mut().zip(&q[32 * s..]) {
            *y = d1 * q as f32 - m1;
        }
    }
}

pub(crate) fn dequantize_q4_k(blocks: &[BlockQ4_K], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK_K)) {
        dequantize_k4(b.d(), b.dmin(), &b.scales, &q4_k_values(&b.qs), y);
    }
}

pub(crate) fn dequantize_q5_k(blocks: &[BlockQ5_K], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK_K)) {
        dequantize_k4(b.d(), b.dmin(), &b.scales, &q5_k_values(b), y);
    }
}

pub(crate) fn dequantize_q6_k(blocks: &[BlockQ6_K], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = b.d();
        let q = q6_k_values(b);
        for (s, y) in y.chunks_exact_mut(16).enumerate() {
            let ds = d * b.scales[s] as f32;
            for (y, &q) in y.iter_mut().zip(&q[16 * s..]) {
                *y = ds * q as f32;
            }
        }
    }
}

pub(crate) fn dequantize_q8_k(blocks: &[BlockQ8_K], y: &mut [f32]) {
    for (b, y) in blocks.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = b.d();
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = d * q as f32;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reference quantizers
// ---------------------------------------------------------------------------------------------

/// `quantize_row_q2_K_ref`: per 16 elements an asymmetric fit (4-bit scale and min) minimising the
/// |x|-weighted absolute error.
pub(crate) fn quantize_q2_k(x: &[f32], blocks: &mut [BlockQ2_K]) {
    const Q4SCALE: f32 = 15.0;
    let search = Qkx2Search {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    for (x, b) in x.chunks_exact(QK_K).zip(blocks) {
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            let weights: [f32; 16] = std::array::from_fn(|i| xs[i].abs());
            (scales[j], mins[j]) = make_qkx2_quants(&search, xs, &weights, &mut l[16 * j..16 * j + 16]);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                b.scales[j] = nearest_int(iscale * scales[j]) as u8;
            }
            b.d = f32_to_f16(max_scale / Q4SCALE);
        } else {
            b.scales = [0; 16];
            b.d = f32_to_f16(0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                b.scales[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            b.dmin = f32_to_f16(max_min / Q4SCALE);
        } else {
            b.dmin = f32_to_f16(0.0);
        }
        for j in 0..16 {
            let d = b.d() * (b.scales[j] & 0xF) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = b.dmin() * (b.scales[j] >> 4) as f32;
            for i in 16 * j..16 * j + 16 {
                l[i] = nearest_int((x[i] + dm) / d).clamp(0, 3) as u8;
            }
        }
        b.qs = pack_2bit(&l);
    }
}

/// `quantize_row_q3_K_ref`: per 16 elements a symmetric 3-bit fit; the 16 scales become signed
/// 6-bit values against `d`.
pub(crate) fn quantize_q3_k(x: &[f32], blocks: &mut [BlockQ3_K]) {
    for (x, b) in x.chunks_exact(QK_K).zip(blocks) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0f32, 0f32);
        for j in 0..16 {
            scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }
        b.scales = [0; 12];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                // ggml stores nearest_int's result in an int8_t before clamping.
                let q = (nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32;
                let q = q as u8;
                if j < 8 {
                    b.scales[j] = q & 0xF;
                } else {
                    b.scales[j - 8] |= (q & 0xF) << 4;
                }
                b.scales[j % 4 + 8] |= (q >> 4) << (2 * (j / 4));
            }
            b.d = f32_to_f16(1.0 / iscale);
        } else {
            b.d = f32_to_f16(0.0);
        }
        let sc = q3_k_scales(&b.scales);
        for j in 0..16 {
            let d = b.d() * sc[j] as f32;
            if d == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = nearest_int(x[i] / d).clamp(-4, 3) as i8 + 4;
            }
        }
        // High bits: element e goes to bit e / 32 of hmask[e % 32], and keeps its low 2 bits.
        b.hmask = [0; 32];
        let mut low = [0u8; QK_K];
        for (e, (&q, low)) in l.iter().zip(low.iter_mut()).enumerate() {
            let mut q = q as u8;
            if q > 3 {
                b.hmask[e % 32] |= 1 << (e / 32);
                q -= 4;
            }
            *low = q;
        }
        b.qs = pack_2bit(&low);
    }
}

/// The shared first half of Q4_K and Q5_K: per 32 elements an asymmetric fit weighted by
/// `rms(x) + |x|`, then 6-bit scales and mins against `d` and `dmin`. Returns the final quants.
fn quantize_k4_scales(
    x: &[f32],
    search: &Qkx2Search,
    d: &mut [u8; 2],
    dmin: &mut [u8; 2],
    packed: &mut [u8; 12],
) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|i| av_x + xs[i].abs());
        (scales[j], mins[j]) = make_qkx2_quants(search, xs, &weights, &mut l[32 * j..32 * j + 32]);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    *packed = [0; 12];
    for j in 0..8 {
        // ggml stores nearest_int's result in a uint8_t (wrapping) before capping at 63.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    *d = f32_to_f16(max_scale / 63.0);
    *dmin = f32_to_f16(max_min / 63.0);
    let (df, dminf) = (super::blocks::f16_to_f32(*d), super::blocks::f16_to_f32(*dmin));
    for (j, (sc, m)) in scales_mins_k4(packed).into_iter().enumerate() {
        let d = df * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dminf * m as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / d).clamp(0, search.nmax) as u8;
        }
    }
    l
}

/// `quantize_row_q4_K_ref`.
pub(crate) fn quantize_q4_k(x: &[f32], blocks: &mut [BlockQ4_K]) {
    let search = Qkx2Search {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    for (x, b) in x.chunks_exact(QK_K).zip(blocks) {
        let l = quantize_k4_scales(x, &search, &mut b.d, &mut b.dmin, &mut b.scales);
        for c in 0..4 {
            for k in 0..32 {
                b.qs[32 * c + k] = l[64 * c + k] | (l[64 * c + 32 + k] << 4);
            }
        }
    }
}

/// `quantize_row_q5_K_ref`.
pub(crate) fn quantize_q5_k(x: &[f32], blocks: &mut [BlockQ5_K]) {
    let search = Qkx2Search {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    for (x, b) in x.chunks_exact(QK_K).zip(blocks) {
        let l = quantize_k4_scales(x, &search, &mut b.d, &mut b.dmin, &mut b.scales);
        b.qh = [0; 32];
        for c in 0..4 {
            for k in 0..32 {
                let (mut l1, mut l2) = (l[64 * c + k], l[64 * c + 32 + k]);
                if l1 > 15 {
                    l1 -= 16;
                    b.qh[k] |= 1 << (2 * c);
                }
                if l2 > 15 {
                    l2 -= 16;
                    b.qh[k] |= 2 << (2 * c);
                }
                b.qs[32 * c + k] = l1 | (l2 << 4);
            }
        }
    }
}

/// `quantize_row_q6_K_ref`: per 16 elements a symmetric 6-bit fit; scales become signed 8-bit
/// values against `d`.
pub(crate) fn quantize_q6_k(x: &[f32], blocks: &mut [BlockQ6_K]) {
    for (x, b) in x.chunks_exact(QK_K).zip(blocks) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
        for ib in 0..16 {
            let scale = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = scale;
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *b = bytemuck::Zeroable::zeroed();
            continue;
        }
        let iscale = -128.0 / max_scale;
        b.d = f32_to_f16(1.0 / iscale);
        for ib in 0..16 {
            b.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
        }
        for j in 0..16 {
            let d = b.d() * b.scales[j] as f32;
            if d == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as i8;
            }
        }
        for h in 0..2 {
            let l = &l[128 * h..128 * h + 128];
            for k in 0..32 {
                let q = |r: usize| l[k + 32 * r] as u8;
                b.ql[64 * h + k] = (q(0) & 0xF) | ((q(2) & 0xF) << 4);
                b.ql[64 * h + k + 32] = (q(1) & 0xF) | ((q(3) & 0xF) << 4);
                b.qh[32 * h + k] = (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
            }
        }
    }
}

/// `quantize_row_q8_K_ref` (also what llama.cpp's x86 backend runs for activations):
/// `d = max / -127` keeps the sign of the element of largest magnitude, quants round half to even.
pub(crate) fn quantize_q8_k(x: &[f32], blocks: &mut [BlockQ8_K]) {
    for (x, b) in x.chunks_exact(QK_K).zip(blocks) {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *b = bytemuck::Zeroable::zeroed();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for j in 0..16 {
            let sum: i32 = b.qs[16 * j..16 * j + 16].iter().map(|&q| i32::from(q)).sum();
            b.set_bsum(j, sum as i16);
        }
        b.d = (1.0 / iscale).to_le_bytes();
    }
}

// ---------------------------------------------------------------------------------------------
// Dot products with Q8_K activations
// ---------------------------------------------------------------------------------------------
//
// Per super-block: `isum` is the exact integer Σ over sub-blocks of (sub-block scale) · (dot
// product of the weight and activation quants); the mins (Q2_K, Q4_K, Q5_K) are applied through the
// activations' `bsums` as `summs = Σ bsums[i] · min(i)`. The super-block adds
// `(d_w·d_x)·isum - (dmin_w·d_x)·summs` to an f32 sum; super-blocks are summed in order.

#[inline]
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum()
}

#[inline]
fn dot_u8_i8(a: &[u8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum()
}

/// Q2_K · Q8_K.
pub(crate) fn dot_q2_k_q8_k(x: &[BlockQ2_K], y: &[BlockQ8_K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let q = unpack_2bit(&x.qs);
        let mut isum = 0i32;
        let mut summs = 0i32;
        for s in 0..16 {
            let e = 16 * s..16 * s + 16;
            isum += i32::from(x.scales[s] & 0xF) * dot_u8_i8(&q[e.clone()], &y.qs[e]);
            summs += i32::from(y.bsum(s)) * i32::from(x.scales[s] >> 4);
        }
        let dall = y.d() * x.d();
        let dmin = y.d() * x.dmin();
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

/// Q3_K · Q8_K.
pub(crate) fn dot_q3_k_q8_k(x: &[BlockQ3_K], y: &[BlockQ8_K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let q = q3_k_values(x);
        let sc = q3_k_scales(&x.scales);
        let mut isum = 0i32;
        for s in 0..16 {
            let e = 16 * s..16 * s + 16;
            isum += i32::from(sc[s]) * dot_i8(&q[e.clone()], &y.qs[e]);
        }
        sumf += (x.d() * y.d()) * isum as f32;
    }
    sumf
}

fn dot_k4(q: &[u8; QK_K], scales: &[u8; 12], d: f32, dmin: f32, y: &BlockQ8_K) -> f32 {
    let mut isum = 0i32;
    let mut summs = 0i32;
    for (s, (sc, m)) in scales_mins_k4(scales).into_iter().enumerate() {
        let e = 32 * s..32 * s + 32;
        isum += i32::from(sc) * dot_u8_i8(&q[e.clone()], &y.qs[e]);
        summs += (i32::from(y.bsum(2 * s)) + i32::from(y.bsum(2 * s + 1))) * i32::from(m);
    }
    (d * y.d()) * isum as f32 - (dmin * y.d()) * summs as f32
}

/// Q4_K · Q8_K.
pub(crate) fn dot_q4_k_q8_k(x: &[BlockQ4_K], y: &[BlockQ8_K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        sumf += dot_k4(&q4_k_values(&x.qs), &x.scales, x.d(), x.dmin(), y);
    }
    sumf
}

/// Q5_K · Q8_K.
pub(crate) fn dot_q5_k_q8_k(x: &[BlockQ5_K], y: &[BlockQ8_K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        sumf += dot_k4(&q5_k_values(x), &x.scales, x.d(), x.dmin(), y);
    }
    sumf
}

/// Q6_K · Q8_K.
pub(crate) fn dot_q6_k_q8_k(x: &[BlockQ6_K], y: &[BlockQ8_K]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in x.iter().zip(y) {
        let q = q6_k_values(x);
        let mut isum = 0i32;
        for s in 0..16 {
            let e = 16 * s..16 * s + 16;
            isum += i32::from(x.scales[s]) * dot_i8(&q[e.clone()], &y.qs[e]);
        }
        sumf += (x.d() * y.d()) * isum as f32;
    }
    sumf
}
