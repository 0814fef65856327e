//! Row formats and dot products for the matmul and the KV cache: the pairing llama.cpp's CPU
//! backend uses (each weight type is dotted against activations converted to its `vec_dot_type`).
//!
//! This is the engine's own minimal set (F32, F16, Q8_0) until `crate::quant` provides the full
//! one with the same four functions; the callers do not change when it does.

use std::sync::OnceLock;

use half::f16;

use crate::quant::GgmlType;

/// f16 -> f32 through a table (as ggml does on CPUs without F16C), faster than converting bits.
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    static TABLE: OnceLock<Vec<f32>> = OnceLock::new();
    let t = TABLE.get_or_init(|| (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).collect());
    t[bits as usize]
}

/// The format activations are converted to before being dotted with rows of type `ty`.
pub fn vec_dot_type(ty: GgmlType) -> GgmlType {
    match ty {
        GgmlType::F32 => GgmlType::F32,
        GgmlType::F16 => GgmlType::F16,
        _ => GgmlType::Q8_0,
    }
}

/// Whether this module can compute with rows of type `ty`.
pub fn supports(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Q8_0)
}

/// Converts one row of f32 values to `ty`.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&s.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f16::from_f32(*s).to_bits().to_le_bytes());
            }
        }
        GgmlType::Q8_0 => {
            for (d, s) in dst.chunks_exact_mut(34).zip(src.chunks_exact(32)) {
                // ggml's quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d).
                let amax = s.iter().fold(0f32, |m, v| m.max(v.abs()));
                let scale = amax / 127.0;
                let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
                d[..2].copy_from_slice(&f16::from_f32(scale).to_bits().to_le_bytes());
                for (q, v) in d[2..].iter_mut().zip(s) {
                    *q = (v * inv).round() as i8 as u8;
                }
            }
        }
        _ => unreachable!("quantize_row: {ty} is not supported (checked at load)"),
    }
}

/// Converts one row of type `ty` to f32.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16_to_f32(u16::from_le_bytes([s[0], s[1]]));
            }
        }
        GgmlType::Q8_0 => {
            for (d, s) in dst.chunks_exact_mut(32).zip(src.chunks_exact(34)) {
                let scale = f16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
                for (o, q) in d.iter_mut().zip(&s[2..]) {
                    *o = scale * f32::from(*q as i8);
                }
            }
        }
        _ => unreachable!("dequantize_row: {ty} is not supported (checked at load)"),
    }
}

/// The dot product of a row of type `ty` with an activation row in `vec_dot_type(ty)`, `n` elements.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    match ty {
        GgmlType::F32 => {
            let (w, a) = (as_f32(&w[..4 * n]), as_f32(&a[..4 * n]));
            w.iter().zip(a.iter()).map(|(x, y)| x * y).sum()
        }
        GgmlType::F16 => {
            let (w, a) = (as_u16(&w[..2 * n]), as_u16(&a[..2 * n]));
            w.iter()
                .zip(a.iter())
                .map(|(x, y)| f16_to_f32(*x) * f16_to_f32(*y))
                .sum()
        }
        GgmlType::Q8_0 => {
            let mut acc = 0f32;
            for (bw, ba) in w.chunks_exact(34).zip(a.chunks_exact(34)).take(n / 32) {
                let dw = f16::from_bits(u16::from_le_bytes([bw[0], bw[1]])).to_f32();
                let da = f16::from_bits(u16::from_le_bytes([ba[0], ba[1]])).to_f32();
                let s: i32 = bw[2..]
                    .iter()
                    .zip(&ba[2..])
                    .map(|(x, y)| i32::from(*x as i8) * i32::from(*y as i8))
                    .sum();
                acc += dw * da * s as f32;
            }
            acc
        }
        _ => unreachable!("vec_dot: {ty} is not supported (checked at load)"),
    }
}

fn as_f32(b: &[u8]) -> std::borrow::Cow<'_, [f32]> {
    // SAFETY: every bit pattern is a valid f32; `align_to` only yields the aligned middle part.
    let (pre, mid, post) = unsafe { b.align_to::<f32>() };
    if pre.is_empty() && post.is_empty() {
        mid.into()
    } else {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<_>>()
            .into()
    }
}

fn as_u16(b: &[u8]) -> std::borrow::Cow<'_, [u16]> {
    // SAFETY: every bit pattern is a valid u16; `align_to` only yields the aligned middle part.
    let (pre, mid, post) = unsafe { b.align_to::<u16>() };
    if pre.is_empty() && post.is_empty() {
        mid.into()
    } else {
        b.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect::<Vec<_>>()
            .into()
    }
}
