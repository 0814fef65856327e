//! aarch64 kernels for the `Neon` tier (Advanced SIMD with the dot-product extension).
//!
//! `sdot` (signed bytes, four products per i32 lane) is emitted with `asm!` because its intrinsic
//! (`vdotq_s32`) is not stable yet; helpers carry `#[target_feature]` and are inlined into the
//! tier's entry points. Results are the scalar reference's integer sums per block, scaled in f32.

#![allow(clippy::missing_safety_doc)]

use std::arch::aarch64::*;
use std::arch::asm;

use super::blocks::*;
use crate::quant::blocks::{q3_k_scales, scale_min_k4};
use crate::quant::GgmlType;

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    asm!("sdot {0:v}.4s, {1:v}.16b, {2:v}.16b", inout(vreg) acc, in(vreg) a, in(vreg) b,
         options(pure, nomem, nostack, preserves_flags));
    acc
}

#[inline(always)]
unsafe fn ld_f16(p: *const u8) -> f32 {
    half::f16::from_bits((p as *const u16).read_unaligned()).to_f32()
}

#[inline(always)]
unsafe fn ld_f32(p: *const u8) -> f32 {
    (p as *const f32).read_unaligned()
}

#[inline(always)]
unsafe fn ld8(p: *const u8) -> int8x16_t {
    vld1q_s8(p as *const i8)
}

/// Low nibbles (elements 0..16) and high nibbles (16..32) of 16 bytes.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> (int8x16_t, int8x16_t) {
    let q = vld1q_u8(p);
    let m = vdupq_n_u8(0x0f);
    (
        vreinterpretq_s8_u8(vandq_u8(q, m)),
        vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)),
    )
}

/// Bits 0..16 and 16..32 of the u32 at `p` as bytes 0x10 (set) or 0.
#[inline(always)]
unsafe fn high_bits(p: *const u8) -> (int8x16_t, int8x16_t) {
    let qh = (p as *const u32).read_unaligned();
    let bit = vld1q_u8([1u8, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128].as_ptr());
    let m = vdupq_n_u8(0x10);
    let lo = vcombine_u8(vdup_n_u8(qh as u8), vdup_n_u8((qh >> 8) as u8));
    let hi = vcombine_u8(vdup_n_u8((qh >> 16) as u8), vdup_n_u8((qh >> 24) as u8));
    (
        vreinterpretq_s8_u8(vandq_u8(vtstq_u8(lo, bit), m)),
        vreinterpretq_s8_u8(vandq_u8(vtstq_u8(hi, bit), m)),
    )
}

/// The 32 signed values of a block of a 32-element type, as two vectors.
#[inline(always)]
unsafe fn q32_values(ty: GgmlType, p: *const u8) -> (int8x16_t, int8x16_t) {
    match ty {
        GgmlType::Q4_0 => {
            let (l, h) = nibbles(p.add(2));
            let o = vdupq_n_s8(8);
            (vsubq_s8(l, o), vsubq_s8(h, o))
        }
        GgmlType::Q4_1 => nibbles(p.add(4)),
        GgmlType::Q5_0 => {
            let (l, h) = nibbles(p.add(6));
            let (bl, bh) = high_bits(p.add(2));
            let o = vdupq_n_s8(16);
            (vsubq_s8(vorrq_s8(l, bl), o), vsubq_s8(vorrq_s8(h, bh), o))
        }
        GgmlType::Q5_1 => {
            let (l, h) = nibbles(p.add(8));
            let (bl, bh) = high_bits(p.add(4));
            (vorrq_s8(l, bl), vorrq_s8(h, bh))
        }
        GgmlType::Q8_0 => (ld8(p.add(2)), ld8(p.add(18))),
        GgmlType::IQ4_NL => {
            let t = ld8(IQ4NL_VALUES.as_ptr() as *const u8);
            let (l, h) = nibbles(p.add(2));
            (
                vqtbl1q_s8(t, vreinterpretq_u8_s8(l)),
                vqtbl1q_s8(t, vreinterpretq_u8_s8(h)),
            )
        }
        _ => unreachable!(),
    }
}

/// One f32 chain per row with one fused multiply-add per block (and one more for Q4_1's and
/// Q5_1's minimum), in block order: the panel GEMM's steps, so that a token gets the same bits
/// alone as in a batch.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn q32_rows<const R: usize>(
    ty: GgmlType,
    nb: usize,
    w: *const u8,
    ws: usize,
    a: *const u8,
) -> [f32; R] {
    let wb = block_bytes(ty);
    let q81 = matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1);
    let ab = if q81 { Q8_1_BYTES } else { Q8_0_BYTES };
    let mut acc = [0f32; R];
    // Four rows go in the lanes of one vector.
    let mut acc4 = vdupq_n_f32(0.0);
    for i in 0..nb {
        let ap = a.add(i * ab);
        let (a0, a1) = (ld8(ap.add(ab - 32)), ld8(ap.add(ab - 16)));
        let da = ld_f16(ap);
        let wp: [*const u8; R] = std::array::from_fn(|r| w.add(r * ws + i * wb));
        let s: [int32x4_t; R] = std::array::from_fn(|r| {
            let (w0, w1) = q32_values(ty, wp[r]);
            sdot(sdot(vdupq_n_s32(0), w0, a0), w1, a1)
        });
        if R == 4 {
            let tot = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
            let sw: [f32; 4] = std::array::from_fn(|r| ld_f16(wp[r]));
            acc4 = vfmaq_f32(acc4, vcvtq_f32_s32(tot), vmulq_n_f32(vld1q_f32(sw.as_ptr()), da));
            if q81 {
                let mw: [f32; 4] = std::array::from_fn(|r| ld_f16(wp[r].add(2)));
                acc4 = vfmaq_n_f32(acc4, vld1q_f32(mw.as_ptr()), ld_f16(ap.add(2)));
            }
        } else {
            for r in 0..R {
                acc[r] = (vaddvq_s32(s[r]) as f32).mul_add(ld_f16(wp[r]) * da, acc[r]);
                if q81 {
                    acc[r] = ld_f16(wp[r].add(2)).mul_add(ld_f16(ap.add(2)), acc[r]);
                }
            }
        }
    }
    if R == 4 {
        vst1q_f32(acc.as_mut_ptr(), acc4);
    }
    acc
}

#[inline(always)]
unsafe fn q8k_parts(a: *const u8, i: usize) -> (f32, *const u8, *const i16) {
    let p = a.add(i * Q8_K_BYTES);
    (ld_f32(p), p.add(4), p.add(260) as *const i16)
}

#[inline(always)]
unsafe fn bsum(bs: *const i16, j: usize) -> i32 {
    i32::from(bs.add(j).read_unaligned())
}

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn q45k_rows<const R: usize>(q5: bool, nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    let wb = if q5 { Q5_K_BYTES } else { Q4_K_BYTES };
    let qs_off = if q5 { 48 } else { 16 };
    let mut out = [0f32; R];
    let m4 = vdupq_n_u8(0x0f);
    for i in 0..nb {
        let (da, q8, bs) = q8k_parts(a, i);
        for (r, o) in out.iter_mut().enumerate() {
            let wp = w.add(r * ws + i * wb);
            let sb = &*(wp.add(4) as *const [u8; 12]);
            let mut sumi = vdupq_n_s32(0);
            let mut summ = 0i32;
            for j in 0..8 {
                let (sc, m) = scale_min_k4(j, sb);
                summ += i32::from(m) * (bsum(bs, 2 * j) + bsum(bs, 2 * j + 1));
                let (c, hi) = (j / 2, j % 2);
                let mut p = vdupq_n_s32(0);
                for half in 0..2 {
                    let q = vld1q_u8(wp.add(qs_off + 32 * c + 16 * half));
                    let mut v = if hi == 0 {
                        vandq_u8(q, m4)
                    } else {
                        vshrq_n_u8::<4>(q)
                    };
                    if q5 {
                        let qh = vld1q_u8(wp.add(16 + 16 * half));
                        let b = vandq_u8(vshlq_u8(qh, vdupq_n_s8(-(j as i8))), vdupq_n_u8(1));
                        v = vorrq_u8(v, vshlq_n_u8::<4>(b));
                    }
                    p = sdot(p, vreinterpretq_s8_u8(v), ld8(q8.add(32 * j + 16 * half)));
                }
                sumi = vmlaq_n_s32(sumi, p, i32::from(sc));
            }
            *o += ld_f16(wp) * da * vaddvq_s32(sumi) as f32 - ld_f16(wp.add(2)) * da * summ as f32;
        }
    }
    out
}

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn q6k_rows<const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    let mut out = [0f32; R];
    let m4 = vdupq_n_u8(0x0f);
    let m3 = vdupq_n_u8(0x03);
    let o32 = vdupq_n_s8(32);
    for i in 0..nb {
        let (da, q8, _) = q8k_parts(a, i);
        for (r, o) in out.iter_mut().enumerate() {
            let wp = w.add(r * ws + i * Q6_K_BYTES);
            let sc = wp.add(192) as *const i8;
            let mut sumi = vdupq_n_s32(0);
            for h in 0..2 {
                for half in 0..2 {
                    let l0 = vld1q_u8(wp.add(64 * h + 16 * half));
                    let l1 = vld1q_u8(wp.add(64 * h + 32 + 16 * half));
                    let qh = vld1q_u8(wp.add(128 + 32 * h + 16 * half));
                    let vals = [
                        vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8::<4>(vandq_u8(qh, m3))),
                        vorrq_u8(
                            vandq_u8(l1, m4),
                            vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(qh), m3)),
                        ),
                        vorrq_u8(
                            vshrq_n_u8::<4>(l0),
                            vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(qh), m3)),
                        ),
                        vorrq_u8(vshrq_n_u8::<4>(l1), vshlq_n_u8::<4>(vshrq_n_u8::<6>(qh))),
                    ];
                    for (part, v) in vals.iter().enumerate() {
                        // Elements 128h + 32part + 16half .. +16: one 16-element sub-block.
                        let e = 128 * h + 32 * part + 16 * half;
                        let q = vsubq_s8(vreinterpretq_s8_u8(*v), o32);
                        let p = sdot(vdupq_n_s32(0), q, ld8(q8.add(e)));
                        sumi = vmlaq_n_s32(sumi, p, i32::from(*sc.add(e / 16)));
                    }
                }
            }
            *o += ld_f16(wp.add(208)) * da * vaddvq_s32(sumi) as f32;
        }
    }
    out
}

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn q3k_rows<const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    let mut out = [0f32; R];
    let m3 = vdupq_n_u8(0x03);
    let one = vdupq_n_u8(1);
    let o4 = vdupq_n_s8(4);
    for i in 0..nb {
        let (da, q8, _) = q8k_parts(a, i);
        for (r, o) in out.iter_mut().enumerate() {
            let wp = w.add(r * ws + i * Q3_K_BYTES);
            let sc = q3_k_scales(&*(wp.add(96) as *const [u8; 12]));
            let mut sumi = vdupq_n_s32(0);
            for h in 0..2 {
                for j in 0..4 {
                    for g in 0..2 {
                        let qs = vld1q_u8(wp.add(32 + 32 * h + 16 * g));
                        let hm = vld1q_u8(wp.add(16 * g));
                        let lo = vandq_u8(vshlq_u8(qs, vdupq_n_s8(-2 * j as i8)), m3);
                        let hb = vandq_u8(vshlq_u8(hm, vdupq_n_s8(-((4 * h + j) as i8))), one);
                        let q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8::<2>(hb))), o4);
                        let e = 128 * h + 32 * j + 16 * g;
                        let p = sdot(vdupq_n_s32(0), q, ld8(q8.add(e)));
                        sumi = vmlaq_n_s32(sumi, p, i32::from(sc[e / 16]));
                    }
                }
            }
            *o += ld_f16(wp.add(108)) * da * vaddvq_s32(sumi) as f32;
        }
    }
    out
}

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn q2k_rows<const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    let mut out = [0f32; R];
    let m3 = vdupq_n_u8(0x03);
    for i in 0..nb {
        let (da, q8, bs) = q8k_parts(a, i);
        for (r, o) in out.iter_mut().enumerate() {
            let wp = w.add(r * ws + i * Q2_K_BYTES);
            let mut sumi = vdupq_n_s32(0);
            let mut summ = 0i32;
            for j in 0..16 {
                summ += i32::from(*wp.add(j) >> 4) * bsum(bs, j);
            }
            for h in 0..2 {
                for j in 0..4 {
                    for g in 0..2 {
                        let qs = vld1q_u8(wp.add(16 + 32 * h + 16 * g));
                        let q = vandq_u8(vshlq_u8(qs, vdupq_n_s8(-2 * j as i8)), m3);
                        let e = 128 * h + 32 * j + 16 * g;
                        let p = sdot(vdupq_n_s32(0), vreinterpretq_s8_u8(q), ld8(q8.add(e)));
                        sumi = vmlaq_n_s32(sumi, p, i32::from(*wp.add(e / 16) & 15));
                    }
                }
            }
            *o += ld_f16(wp.add(80)) * da * vaddvq_s32(sumi) as f32 - ld_f16(wp.add(82)) * da * summ as f32;
        }
    }
    out
}

/// IQ4_XS sub-block `ib`'s scale (6 bits, minus 32).
#[inline(always)]
unsafe fn iq4xs_scale(p: *const u8, ib: usize) -> i16 {
    let sh = (p.add(2) as *const u16).read_unaligned();
    let lo = (*p.add(4 + ib / 2) >> (4 * (ib % 2))) & 15;
    i16::from(lo | ((((sh >> (2 * ib)) & 3) as u8) << 4)) - 32
}

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn iq4xs_rows<const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    let mut out = [0f32; R];
    let t = ld8(IQ4NL_VALUES.as_ptr() as *const u8);
    for i in 0..nb {
        let (da, q8, _) = q8k_parts(a, i);
        for (r, o) in out.iter_mut().enumerate() {
            let wp = w.add(r * ws + i * IQ4_XS_BYTES);
            let mut sumi = vdupq_n_s32(0);
            for ib in 0..8 {
                let (l, h) = nibbles(wp.add(8 + 16 * ib));
                let l = vqtbl1q_s8(t, vreinterpretq_u8_s8(l));
                let h = vqtbl1q_s8(t, vreinterpretq_u8_s8(h));
                let p = sdot(
                    sdot(vdupq_n_s32(0), l, ld8(q8.add(32 * ib))),
                    h,
                    ld8(q8.add(32 * ib + 16)),
                );
                sumi = vmlaq_n_s32(sumi, p, i32::from(iq4xs_scale(wp, ib)));
            }
            *o += ld_f16(wp) * da * vaddvq_s32(sumi) as f32;
        }
    }
    out
}

/// Four f16 values at `p` widened to f32 (`fcvtl` by `asm!`: the f16 intrinsics are not
/// stable); exact.
#[inline(always)]
pub(super) unsafe fn f16x4(p: *const u8) -> float32x4_t {
    let h = vld1_u16(p as *const u16);
    let r: float32x4_t;
    asm!("fcvtl {0:v}.4s, {1:v}.4h", out(vreg) r, in(vreg) h, options(pure, nomem, nostack, preserves_flags));
    r
}

#[inline(always)]
unsafe fn bf16x4(p: *const u8) -> float32x4_t {
    vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(p as *const u16)))
}

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn float_rows<const R: usize>(
    ty: GgmlType,
    n: usize,
    w: *const u8,
    ws: usize,
    a: *const u8,
) -> [f32; R] {
    let es = if ty == GgmlType::F32 { 4 } else { 2 };
    let load = |p: *const u8| match ty {
        GgmlType::F32 => vld1q_f32(p as *const f32),
        GgmlType::F16 => f16x4(p),
        _ => bf16x4(p),
    };
    let scalar_at = |p: *const u8| match ty {
        GgmlType::F32 => ld_f32(p),
        GgmlType::F16 => ld_f16(p),
        _ => f32::from_bits(u32::from((p as *const u16).read_unaligned()) << 16),
    };
    let mut acc = [vdupq_n_f32(0.0); R];
    let n4 = n / 4 * 4;
    for i in (0..n4).step_by(4) {
        let av = load(a.add(es * i));
        for r in 0..R {
            acc[r] = vfmaq_f32(acc[r], load(w.add(r * ws + es * i)), av);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = vaddvq_f32(acc[r]);
        for k in n4..n {
            out[r] += scalar_at(w.add(r * ws + es * k)) * scalar_at(a.add(es * k));
        }
    }
    out
}

/// `out[r] = w_r · a` for the `out.len()` rows starting at `w` (stride `ws` bytes).
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn dot_rows(ty: GgmlType, n: usize, w: *const u8, ws: usize, a: *const u8, out: &mut [f32]) {
    macro_rules! go {
        ($f:ident ($($pre:expr),*), $nb:expr) => {{
            let nr = out.len();
            let mut r = 0;
            while r + 4 <= nr {
                let v = $f::<4>($($pre,)* $nb, w.add(r * ws), ws, a);
                out[r..r + 4].copy_from_slice(&v);
                r += 4;
            }
            while r < nr {
                out[r] = $f::<1>($($pre,)* $nb, w.add(r * ws), ws, a)[0];
                r += 1;
            }
        }};
    }
    use GgmlType as T;
    match ty {
        T::F32 | T::F16 | T::BF16 => go!(float_rows(ty), n),
        T::Q4_0 | T::Q4_1 | T::Q5_0 | T::Q5_1 | T::Q8_0 | T::IQ4_NL => go!(q32_rows(ty), n / 32),
        T::Q2_K => go!(q2k_rows(), n / 256),
        T::Q3_K => go!(q3k_rows(), n / 256),
        T::Q4_K => go!(q45k_rows(false), n / 256),
        T::Q5_K => go!(q45k_rows(true), n / 256),
        T::Q6_K => go!(q6k_rows(), n / 256),
        T::IQ4_XS => go!(iq4xs_rows(), n / 256),
        _ => unreachable!("no kernel for {ty}"),
    }
}

/// One 32-block as llama.cpp's NEON code quantizes it (`x * 127/amax`, rounded half to even,
/// FCVTNS): the quants written to `out`; returns (d, Σq).
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q8_block(x: *const f32, out: *mut u8) -> (f32, i32) {
    let v: [float32x4_t; 8] = std::array::from_fn(|k| vld1q_f32(x.add(4 * k)));
    let mut m = vabsq_f32(v[0]);
    for vk in &v[1..] {
        m = vmaxq_f32(m, vabsq_f32(*vk));
    }
    let amax = vmaxvq_f32(m);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let q: [int32x4_t; 8] = std::array::from_fn(|k| vcvtnq_s32_f32(vmulq_n_f32(v[k], id)));
    let mut sum = vdupq_n_s32(0);
    for k in 0..8 {
        sum = vaddq_s32(sum, q[k]);
    }
    for k in 0..4 {
        let h = vcombine_s16(vmovn_s32(q[2 * k]), vmovn_s32(q[2 * k + 1]));
        vst1_s8(out.add(8 * k) as *mut i8, vmovn_s16(h));
    }
    (d, vaddvq_s32(sum))
}

#[target_feature(enable = "neon")]
pub unsafe fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (x, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let (d, _) = q8_block(x.as_ptr(), y.as_mut_ptr().add(2));
        y[..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
    }
}

#[target_feature(enable = "neon")]
pub unsafe fn quantize_q8_1(x: &[f32], out: &mut [u8]) {
    for (x, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
        let (d, sum) = q8_block(x.as_ptr(), y.as_mut_ptr().add(4));
        y[..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        y[2..4].copy_from_slice(&half::f16::from_f32(sum as f32 * d).to_bits().to_le_bytes());
    }
}

#[target_feature(enable = "neon")]
pub unsafe fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    for (x, y) in x.chunks_exact(256).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let xp = x.as_ptr();
        let mut m = vdupq_n_f32(0.0);
        for k in 0..64 {
            m = vmaxq_f32(m, vabsq_f32(vld1q_f32(xp.add(4 * k))));
        }
        let amax = vmaxvq_f32(m);
        if amax == 0.0 {
            y.fill(0);
            continue;
        }
        let max = *x
            .iter()
            .find(|v| v.abs() == amax)
            .expect("amax is one of the values");
        let iscale = -127.0 / max;
        let yq = y.as_mut_ptr().add(4) as *mut i8;
        let bs = y.as_mut_ptr().add(260) as *mut i16;
        for j in 0..16 {
            let q: [int32x4_t; 4] = std::array::from_fn(|k| {
                vminq_s32(
                    vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xp.add(16 * j + 4 * k)), iscale)),
                    vdupq_n_s32(127),
                )
            });
            let s = vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
            bs.add(j).write_unaligned(s as i16);
            let lo = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
            let hi = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
            vst1q_s8(yq.add(16 * j), vcombine_s8(vmovn_s16(lo), vmovn_s16(hi)));
        }
        y[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// GEMM micro-kernel over an expanded panel (see `gemm.rs`): 16 rows x 2 tokens per pass, `sdot`
// by lane (the token's four activation bytes of a step are one 32-bit lane).

use super::gemm::{Tile, PANEL_ROWS};

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn sdot_lane<const L: i32>(mut acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    asm!("sdot {0:v}.4s, {1:v}.16b, {2:v}.4b[{l}]", inout(vreg) acc, in(vreg) w, in(vreg) a, l = const L,
         options(pure, nomem, nostack, preserves_flags));
    acc
}

/// `C` tokens from `t0` against the panel. The integer sums of each sub-block are those of the
/// row kernels; so are the float steps, so that a token gets the same bits in a batch as alone:
/// for the 32-element formats (`K` false) one fused multiply-add per block, `out += Σ · (s·da)`
/// (and `out += m · msum` for a minimum); for the K-quants ([`super::gemm::Expansion::
/// int_scales`]) each sub-block's sums times its integer scale (and the activations' sums times
/// its integer minimum) add up over the super-block in i32, then `out += (d·da)·Σ - (dmin·da)·Σm`
/// once per super-block.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn gemm_tile<const C: usize, const SUB: usize, const MIN: bool, const K: bool>(
    g: &Tile,
    t0: usize,
    out: *mut f32,
    os: usize,
    rows: usize,
) {
    let p = g.panel;
    let n_sub = p.n_sub;
    let vals = p.vals.as_ptr();
    let steps = SUB / 4;
    // Sub-blocks per float step.
    let per = if K { 256 / SUB } else { 1 };
    let lanes = |v: &Vec<f32>, at: usize| -> [float32x4_t; 4] {
        std::array::from_fn(|q| vld1q_f32(v.as_ptr().add(at * PANEL_ROWS + 4 * q)))
    };
    let ilanes = |v: &Vec<i32>, at: usize| -> [int32x4_t; 4] {
        std::array::from_fn(|q| vld1q_s32(v.as_ptr().add(at * PANEL_ROWS + 4 * q)))
    };
    let mut accf = [[vdupq_n_f32(0.0); 4]; C];
    let arow: [*const u8; C] = std::array::from_fn(|c| g.xq.as_ptr().add((t0 + c) * g.row_bytes));
    for sb in 0..n_sub / per {
        let mut sumi = [[vdupq_n_s32(0); 4]; C];
        for j in sb * per..(sb + 1) * per {
            let mut acci = [[vdupq_n_s32(0); 4]; C];
            let qo = g.side.qoff[j] as usize;
            for kk in 0..SUB / 16 {
                let a: [int8x16_t; C] = std::array::from_fn(|c| ld8(arow[c].add(qo + 16 * kk)));
                macro_rules! step {
                    ($l:literal) => {{
                        let base = vals.add((j * steps + 4 * kk + $l) * 64);
                        let w: [int8x16_t; 4] = std::array::from_fn(|q| vld1q_s8(base.add(16 * q)));
                        for c in 0..C {
                            for q in 0..4 {
                                acci[c][q] = sdot_lane::<$l>(acci[c][q], w[q], a[c]);
                            }
                        }
                    }};
                }
                step!(0);
                step!(1);
                step!(2);
                step!(3);
            }
            if K {
                let sc = ilanes(&p.iscales, j);
                for c in 0..C {
                    for q in 0..4 {
                        sumi[c][q] = vmlaq_s32(sumi[c][q], acci[c][q], sc[q]);
                    }
                }
                continue;
            }
            let ws = lanes(&p.scales, j);
            for c in 0..C {
                let d = g.side.d[(t0 + c) * n_sub + j];
                for q in 0..4 {
                    accf[c][q] = vfmaq_f32(accf[c][q], vcvtq_f32_s32(acci[c][q]), vmulq_n_f32(ws[q], d));
                }
            }
            if MIN {
                let wm = lanes(&p.mins, j);
                for c in 0..C {
                    let m = g.side.msum[(t0 + c) * n_sub + j];
                    for q in 0..4 {
                        accf[c][q] = vfmaq_n_f32(accf[c][q], wm[q], m);
                    }
                }
            }
        }
        if !K {
            continue;
        }
        let mut summ = [[vdupq_n_s32(0); 4]; C];
        if MIN {
            for j in sb * per..(sb + 1) * per {
                let m = ilanes(&p.imins, j);
                for c in 0..C {
                    let sa = g.side.sum[(t0 + c) * n_sub + j];
                    for q in 0..4 {
                        summ[c][q] = vmlaq_n_s32(summ[c][q], m[q], sa);
                    }
                }
            }
        }
        let dw = lanes(&p.sb_d, sb);
        let dm = if MIN { lanes(&p.sb_dmin, sb) } else { dw };
        for c in 0..C {
            let da = g.side.d[(t0 + c) * n_sub + sb * per];
            for q in 0..4 {
                let mut x = vmulq_f32(vmulq_n_f32(dw[q], da), vcvtq_f32_s32(sumi[c][q]));
                if MIN {
                    x = vsubq_f32(x, vmulq_f32(vmulq_n_f32(dm[q], da), vcvtq_f32_s32(summ[c][q])));
                }
                accf[c][q] = vaddq_f32(accf[c][q], x);
            }
        }
    }
    for c in 0..C {
        let mut tmp = [0f32; 16];
        for q in 0..4 {
            vst1q_f32(tmp.as_mut_ptr().add(4 * q), accf[c][q]);
        }
        std::ptr::copy_nonoverlapping(tmp.as_ptr(), out.add((t0 + c) * os), rows);
    }
}

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn gemm_body<const SUB: usize, const MIN: bool, const K: bool>(
    g: &Tile,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
    rows: usize,
) {
    let mut t = tokens.start;
    while t + 2 <= tokens.end {
        gemm_tile::<2, SUB, MIN, K>(g, t, out, os, rows);
        t += 2;
    }
    if t < tokens.end {
        gemm_tile::<1, SUB, MIN, K>(g, t, out, os, rows);
    }
}

/// Tokens `tokens` of the batch against the panel: `out[t * os + r]` for `r < rows`.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn gemm(g: &Tile, tokens: std::ops::Range<usize>, out: *mut f32, os: usize, rows: usize) {
    match (g.e.int_scales, g.e.sub, g.e.has_min) {
        (false, _, false) => gemm_body::<32, false, false>(g, tokens, out, os, rows),
        (false, _, true) => gemm_body::<32, true, false>(g, tokens, out, os, rows),
        (true, 32, false) => gemm_body::<32, false, true>(g, tokens, out, os, rows),
        (true, 32, true) => gemm_body::<32, true, true>(g, tokens, out, os, rows),
        (true, _, false) => gemm_body::<16, false, true>(g, tokens, out, os, rows),
        (true, _, true) => gemm_body::<16, true, true>(g, tokens, out, os, rows),
    }
}
