//! Portable kernels: the `Isa::Scalar` tier, for CPUs without the SIMD extensions the other tiers
//! need. Every result is the same integer sum per block as ggml's generic C code, scaled in f32;
//! the SIMD tiers are tested against `crate::quant`'s reference and against these.

use half::f16;

use super::blocks::*;
use crate::quant::GgmlType;

#[inline]
fn f16_at(b: &[u8], off: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

#[inline]
fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[inline]
fn i16_at(b: &[u8], off: usize) -> i32 {
    i32::from(i16::from_le_bytes([b[off], b[off + 1]]))
}

/// ggml's `quantize_row_q8_0_ref`: `d = max|x| / 127`, `q = round(x / d)` (half away from zero).
pub fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (x, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        for (q, v) in y[2..].iter_mut().zip(x) {
            *q = (v * id).round() as i8 as u8;
        }
    }
}

/// ggml's `quantize_row_q8_1_ref`: Q8_0 plus `s = d * Σq`.
pub fn quantize_q8_1(x: &[f32], out: &mut [u8]) {
    for (x, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, v) in y[4..].iter_mut().zip(x) {
            let r = (v * id).round() as i8;
            sum += i32::from(r);
            *q = r as u8;
        }
        y[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        y[2..4].copy_from_slice(&f16::from_f32(sum as f32 * d).to_bits().to_le_bytes());
    }
}

/// ggml's `quantize_row_q8_K_ref`: the element of largest magnitude (the first one, sign kept)
/// maps to -127, `q = min(127, round_half_even(-127 / max * x))`, `d = 1 / iscale`, plus the sums
/// of each 16 quants.
pub fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    for (x, y) in x.chunks_exact(256).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            y.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        for (q, v) in y[4..260].iter_mut().zip(x) {
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8 as u8;
        }
        for j in 0..16 {
            let s: i32 = y[4 + 16 * j..4 + 16 * (j + 1)]
                .iter()
                .map(|&q| i32::from(q as i8))
                .sum();
            y[260 + 2 * j..262 + 2 * j].copy_from_slice(&(s as i16).to_le_bytes());
        }
        y[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// f32 -> f16, round to nearest even.
pub fn quantize_f16(x: &[f32], out: &mut [u8]) {
    for (v, o) in x.iter().zip(out.chunks_exact_mut(2)) {
        o.copy_from_slice(&f16::from_f32(*v).to_bits().to_le_bytes());
    }
}

/// f32 -> bf16, round to nearest even (NaN kept quiet), as ggml's `GGML_FP32_TO_BF16`.
pub fn quantize_bf16(x: &[f32], out: &mut [u8]) {
    for (v, o) in x.iter().zip(out.chunks_exact_mut(2)) {
        o.copy_from_slice(&f32_to_bf16(*v).to_le_bytes());
    }
}

pub fn f32_to_bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

pub fn quantize_f32(x: &[f32], out: &mut [u8]) {
    for (v, o) in x.iter().zip(out.chunks_exact_mut(4)) {
        o.copy_from_slice(&v.to_le_bytes());
    }
}

/// The dot product of one weight row of type `ty` (`n` elements) with an activation row in
/// `vec_dot_type(ty)`.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    use GgmlType::*;
    match ty {
        F32 => (0..n).map(|i| f32_at(w, 4 * i) * f32_at(a, 4 * i)).sum(),
        F16 => (0..n).map(|i| f16_at(w, 2 * i) * f16_at(a, 2 * i)).sum(),
        BF16 => (0..n).map(|i| bf16_at(w, 2 * i) * bf16_at(a, 2 * i)).sum(),
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL => dot_q32_q8_0(ty, n, w, a),
        Q4_1 | Q5_1 => dot_q32_q8_1(ty, n, w, a),
        Q2_K => dot_q2_k(n, w, a),
        Q3_K => dot_q3_k(n, w, a),
        Q4_K | Q5_K => dot_q45_k(ty, n, w, a),
        Q6_K => dot_q6_k(n, w, a),
        IQ4_XS => dot_iq4_xs(n, w, a),
        _ => unreachable!("no kernel for {ty}"),
    }
}

fn bf16_at(b: &[u8], off: usize) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([b[off], b[off + 1]])) << 16)
}

/// The 32 signed values of one block of a 32-element type, in element order.
fn q32_values(ty: GgmlType, b: &[u8]) -> [i32; 32] {
    let mut v = [0i32; 32];
    match ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::IQ4_NL => {
            let (qs, off) = if ty == GgmlType::Q4_1 {
                (&b[4..20], 0)
            } else {
                (&b[2..18], 8)
            };
            for j in 0..16 {
                let (lo, hi) = (i32::from(qs[j] & 15), i32::from(qs[j] >> 4));
                if ty == GgmlType::IQ4_NL {
                    v[j] = i32::from(IQ4NL_VALUES[lo as usize]);
                    v[j + 16] = i32::from(IQ4NL_VALUES[hi as usize]);
                } else {
                    v[j] = lo - off;
                    v[j + 16] = hi - off;
                }
            }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let o = if ty == GgmlType::Q5_1 { 4 } else { 2 };
            let qh = u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
            let qs = &b[o + 4..o + 20];
            let off = if ty == GgmlType::Q5_0 { 16 } else { 0 };
            for j in 0..16 {
                let h0 = ((qh >> j) & 1) as i32;
                let h1 = ((qh >> (j + 16)) & 1) as i32;
                v[j] = (i32::from(qs[j] & 15) | (h0 << 4)) - off;
                v[j + 16] = (i32::from(qs[j] >> 4) | (h1 << 4)) - off;
            }
        }
        GgmlType::Q8_0 => {
            for j in 0..32 {
                v[j] = i32::from(b[2 + j] as i8);
            }
        }
        _ => unreachable!(),
    }
    v
}

fn dot_q32_q8_0(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    let wb = block_bytes(ty);
    let mut acc = 0f32;
    for i in 0..n / 32 {
        let (bw, ba) = (&w[i * wb..(i + 1) * wb], &a[i * Q8_0_BYTES..(i + 1) * Q8_0_BYTES]);
        let v = q32_values(ty, bw);
        let s: i32 = (0..32).map(|j| v[j] * i32::from(ba[2 + j] as i8)).sum();
        acc += s as f32 * (f16_at(bw, 0) * f16_at(ba, 0));
    }
    acc
}

fn dot_q32_q8_1(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    let wb = block_bytes(ty);
    let mut acc = 0f32;
    for i in 0..n / 32 {
        let (bw, ba) = (&w[i * wb..(i + 1) * wb], &a[i * Q8_1_BYTES..(i + 1) * Q8_1_BYTES]);
        let v = q32_values(ty, bw);
        let s: i32 = (0..32).map(|j| v[j] * i32::from(ba[4 + j] as i8)).sum();
        acc += s as f32 * (f16_at(bw, 0) * f16_at(ba, 0)) + f16_at(bw, 2) * f16_at(ba, 2);
    }
    acc
}

/// Q4_K / Q5_K: 8 sub-blocks of 32 with a 6-bit scale and a 6-bit min each.
pub(crate) fn k4_scale_min(sc: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (sc[j] & 63, sc[j + 4] & 63)
    } else {
        (
            (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4),
            (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
        )
    }
}

fn q8k(a: &[u8], i: usize) -> (f32, &[u8], &[u8]) {
    let b = &a[i * Q8_K_BYTES..(i + 1) * Q8_K_BYTES];
    (f32_at(b, 0), &b[4..260], &b[260..292])
}

fn dot_q45_k(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    let wb = block_bytes(ty);
    let mut acc = 0f32;
    for i in 0..n / 256 {
        let bw = &w[i * wb..(i + 1) * wb];
        let (da, q8, bs) = q8k(a, i);
        let (d, dmin, sc) = (f16_at(bw, 0), f16_at(bw, 2), &bw[4..16]);
        let (qh, qs) = if ty == GgmlType::Q5_K {
            (&bw[16..48], &bw[48..176])
        } else {
            (&bw[0..0], &bw[16..144])
        };
        let (mut sumi, mut summ) = (0i32, 0i32);
        for j in 0..8 {
            let (s, m) = k4_scale_min(sc, j);
            let (c, hi) = (j / 2, j % 2);
            let mut t = 0i32;
            for l in 0..32 {
                let mut q = i32::from(if hi == 0 {
                    qs[32 * c + l] & 15
                } else {
                    qs[32 * c + l] >> 4
                });
                if !qh.is_empty() {
                    q |= i32::from((qh[l] >> j) & 1) << 4;
                }
                t += q * i32::from(q8[32 * j + l] as i8);
            }
            sumi += i32::from(s) * t;
            summ += i32::from(m) * (i16_at(bs, 4 * j) + i16_at(bs, 4 * j + 2));
        }
        acc += d * da * sumi as f32 - dmin * da * summ as f32;
    }
    acc
}

fn dot_q6_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for i in 0..n / 256 {
        let bw = &w[i * Q6_K_BYTES..(i + 1) * Q6_K_BYTES];
        let (da, q8, _) = q8k(a, i);
        let (ql, qh, sc, d) = (&bw[0..128], &bw[128..192], &bw[192..208], f16_at(bw, 208));
        let mut sumi = 0i32;
        for e in 0..256 {
            let (h, r) = (e / 128, e % 128);
            let (part, l) = (r / 32, r % 32);
            let lo = match part {
                0 => ql[64 * h + l] & 15,
                1 => ql[64 * h + l + 32] & 15,
                2 => ql[64 * h + l] >> 4,
                _ => ql[64 * h + l + 32] >> 4,
            };
            let hb = (qh[32 * h + l] >> (2 * part)) & 3;
            let q = i32::from(lo | (hb << 4)) - 32;
            sumi += i32::from(sc[e / 16] as i8) * q * i32::from(q8[e] as i8);
        }
        acc += d * da * sumi as f32;
    }
    acc
}

/// Q3_K's 16 signed 6-bit scales.
pub(crate) fn q3k_scales(b: &[u8]) -> [i32; 16] {
    let mut s = [0i32; 16];
    for k in 0..4 {
        s[k] = i32::from((b[k] & 15) | ((b[8 + k] & 3) << 4)) - 32;
        s[4 + k] = i32::from((b[4 + k] & 15) | (((b[8 + k] >> 2) & 3) << 4)) - 32;
        s[8 + k] = i32::from((b[k] >> 4) | (((b[8 + k] >> 4) & 3) << 4)) - 32;
        s[12 + k] = i32::from((b[4 + k] >> 4) | (((b[8 + k] >> 6) & 3) << 4)) - 32;
    }
    s
}

fn dot_q3_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for i in 0..n / 256 {
        let bw = &w[i * Q3_K_BYTES..(i + 1) * Q3_K_BYTES];
        let (da, q8, _) = q8k(a, i);
        let (hm, qs, sc, d) = (&bw[0..32], &bw[32..96], q3k_scales(&bw[96..108]), f16_at(bw, 108));
        let mut sumi = 0i32;
        for e in 0..256 {
            let (h, r) = (e / 128, e % 128);
            let (j, l) = (r / 32, r % 32);
            let q = i32::from((qs[32 * h + l] >> (2 * j)) & 3);
            let hbit = (hm[l] >> (4 * h + j)) & 1;
            let v = q - if hbit != 0 { 0 } else { 4 };
            sumi += sc[e / 16] * v * i32::from(q8[e] as i8);
        }
        acc += d * da * sumi as f32;
    }
    acc
}

fn dot_q2_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for i in 0..n / 256 {
        let bw = &w[i * Q2_K_BYTES..(i + 1) * Q2_K_BYTES];
        let (da, q8, bs) = q8k(a, i);
        let (sc, qs, d, dmin) = (&bw[0..16], &bw[16..80], f16_at(bw, 80), f16_at(bw, 82));
        let (mut sumi, mut summ) = (0i32, 0i32);
        for e in 0..256 {
            let (h, r) = (e / 128, e % 128);
            let (j, l) = (r / 32, r % 32);
            let q = i32::from((qs[32 * h + l] >> (2 * j)) & 3);
            sumi += i32::from(sc[e / 16] & 15) * q * i32::from(q8[e] as i8);
        }
        for j in 0..16 {
            summ += i32::from(sc[j] >> 4) * i16_at(bs, 2 * j);
        }
        acc += d * da * sumi as f32 - dmin * da * summ as f32;
    }
    acc
}

pub(crate) fn iq4xs_scale(b: &[u8], ib: usize) -> i32 {
    let sh = u16::from_le_bytes([b[2], b[3]]);
    let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 15;
    i32::from(lo | ((((sh >> (2 * ib)) & 3) as u8) << 4)) - 32
}

fn dot_iq4_xs(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for i in 0..n / 256 {
        let bw = &w[i * IQ4_XS_BYTES..(i + 1) * IQ4_XS_BYTES];
        let (da, q8, _) = q8k(a, i);
        let d = f16_at(bw, 0) * da;
        for ib in 0..8 {
            let qs = &bw[8 + 16 * ib..8 + 16 * (ib + 1)];
            let mut s = 0i32;
            for j in 0..16 {
                s += i32::from(IQ4NL_VALUES[usize::from(qs[j] & 15)]) * i32::from(q8[32 * ib + j] as i8);
                s += i32::from(IQ4NL_VALUES[usize::from(qs[j] >> 4)]) * i32::from(q8[32 * ib + 16 + j] as i8);
            }
            acc += d * iq4xs_scale(bw, ib) as f32 * s as f32;
        }
    }
    acc
}
