//! x86-64 kernels for the `Avx2` and `Avx512` tiers.
//!
//! The row-major kernels are written once, generic over [`IDot`] (how u8 x i8 products and i16
//! pairs are summed into i32 lanes: AVX2's `maddubs` + `madd`, or AVX-512 VNNI's `vpdpbusd` /
//! `vpdpwssd` on 256-bit vectors), and instantiated inside `#[target_feature]` functions of each
//! tier so that every helper is inlined and compiled for that tier. Results are the integer sums of
//! the scalar reference per block, scaled in f32 (only the float summation order differs).

#![allow(clippy::missing_safety_doc)]

pub(super) mod amx;
pub(super) mod avx2_packed;

use std::arch::x86_64::*;

use super::blocks::*;
use crate::quant::blocks::q3_k_scales;
use crate::quant::GgmlType;

// ---------------------------------------------------------------------------------------------
// Small helpers. All are `#[inline(always)]`: they only ever run inlined into a tier's
// `#[target_feature]` function, where the intrinsics they call are available.

#[inline(always)]
unsafe fn f16_to_f32(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

#[inline(always)]
unsafe fn ld_f16(p: *const u8) -> f32 {
    f16_to_f32((p as *const u16).read_unaligned())
}

#[inline(always)]
unsafe fn ld_f32(p: *const u8) -> f32 {
    (p as *const f32).read_unaligned()
}

#[inline(always)]
unsafe fn ld256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

#[inline(always)]
unsafe fn ld128(p: *const u8) -> __m128i {
    _mm_loadu_si128(p as *const __m128i)
}

/// `N` loads of `BYTES` (16, or 8 for one half's rows) from `p`, 16 bytes apart: a packed
/// tile's scale bytes, one row per byte lane. A plain loop, not `array::from_fn`, whose closure
/// would not get the calling kernel's target features if the compiler left it out of line.
#[inline(always)]
unsafe fn ld_rows<const N: usize, const BYTES: usize>(p: *const u8) -> [__m128i; N] {
    let mut v = [_mm_setzero_si128(); N];
    for (i, v) in v.iter_mut().enumerate() {
        let q = p.add(16 * i) as *const __m128i;
        *v = if BYTES == 8 {
            _mm_loadl_epi64(q)
        } else {
            _mm_loadu_si128(q)
        };
    }
    v
}

#[inline(always)]
unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[inline(always)]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// 32 nibbles (16 bytes: low nibbles are elements 0..16, high nibbles 16..32) as 32 bytes: the
/// 16 bytes loaded into both halves at once, the upper half shifted by 4, one mask.
#[inline(always)]
unsafe fn nibbles32(p: *const u8) -> __m256i {
    let t = _mm256_broadcastsi128_si256(ld128(p));
    let t = _mm256_srlv_epi64(t, _mm256_setr_epi64x(0, 0, 4, 4));
    _mm256_and_si256(t, _mm256_set1_epi8(0x0f))
}

/// Bit `i` of the little-endian u32 at `p` as byte `i`: 0xff if set, 0 if not.
#[inline(always)]
unsafe fn bytes_from_bits32(p: *const u8) -> __m256i {
    let x = (p as *const u32).read_unaligned() as i32;
    let shuf = _mm256_setr_epi64x(
        0,
        0x0101_0101_0101_0101,
        0x0202_0202_0202_0202,
        0x0303_0303_0303_0303,
    );
    let b = _mm256_shuffle_epi8(_mm256_set1_epi32(x), shuf);
    let bit = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(b, bit), _mm256_set1_epi64x(-1))
}

/// How u8 x i8 products are summed into i32 lanes.
pub trait IDot {
    /// `acc + Σ u[4i..4i+4] * s[4i..4i+4]` per i32 lane. With AVX2 the pairwise i16 sums must not
    /// saturate: `u` must stay below 129 (callers use the sign trick for full-range bytes).
    unsafe fn dpbusd(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;
    /// `acc + x[2i]*y[2i] + x[2i+1]*y[2i+1]` per i32 lane (i16 inputs).
    unsafe fn dpwssd(acc: __m256i, x: __m256i, y: __m256i) -> __m256i;
}

pub struct Avx2;
pub struct Vnni;

impl IDot for Avx2 {
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_add_epi32(
            acc,
            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)),
        )
    }
    #[inline(always)]
    unsafe fn dpwssd(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(x, y))
    }
}

impl IDot for Vnni {
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, u, s)
    }
    #[inline(always)]
    unsafe fn dpwssd(acc: __m256i, x: __m256i, y: __m256i) -> __m256i {
        _mm256_dpwssd_epi32(acc, x, y)
    }
}

/// Signed x signed bytes through the sign trick: `|w| * (a * sign(w))`.
#[inline(always)]
unsafe fn dot_ss<D: IDot>(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
    D::dpbusd(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w))
}

/// i16 products of 32 u8 weights with 32 i8 activations, summed in adjacent pairs.
#[inline(always)]
unsafe fn maddubs(u: __m256i, s: __m256i) -> __m256i {
    _mm256_maddubs_epi16(u, s)
}

// ---------------------------------------------------------------------------------------------
// 32-element block types against Q8_0 / Q8_1 activations.

trait Q32 {
    const WB: usize;
    /// Activation block: Q8_0 (34 bytes) or Q8_1 (36 bytes, with `s = d * Σq`).
    const AB: usize;
    /// Values are signed bytes (Q8_0, IQ4_NL); else unsigned, minus `OFF` or plus a min.
    const SIGNED: bool;
    const OFF: i8;
    const MIN: bool;
    unsafe fn quants(p: *const u8) -> __m256i;
}

struct Q4_0;
struct Q4_1;
struct Q5_0;
struct Q5_1;
struct Q8_0;
struct Iq4Nl;

impl Q32 for Q4_0 {
    const WB: usize = Q4_0_BYTES;
    const AB: usize = Q8_0_BYTES;
    const SIGNED: bool = false;
    const OFF: i8 = 8;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> __m256i {
        nibbles32(p.add(2))
    }
}

impl Q32 for Q4_1 {
    const WB: usize = Q4_1_BYTES;
    const AB: usize = Q8_1_BYTES;
    const SIGNED: bool = false;
    const OFF: i8 = 0;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> __m256i {
        nibbles32(p.add(4))
    }
}

impl Q32 for Q5_0 {
    const WB: usize = Q5_0_BYTES;
    const AB: usize = Q8_0_BYTES;
    const SIGNED: bool = false;
    const OFF: i8 = 16;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> __m256i {
        let hi = _mm256_and_si256(bytes_from_bits32(p.add(2)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles32(p.add(6)), hi)
    }
}

impl Q32 for Q5_1 {
    const WB: usize = Q5_1_BYTES;
    const AB: usize = Q8_1_BYTES;
    const SIGNED: bool = false;
    const OFF: i8 = 0;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> __m256i {
        let hi = _mm256_and_si256(bytes_from_bits32(p.add(4)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles32(p.add(8)), hi)
    }
}

impl Q32 for Q8_0 {
    const WB: usize = Q8_0_BYTES;
    const AB: usize = Q8_0_BYTES;
    const SIGNED: bool = true;
    const OFF: i8 = 0;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> __m256i {
        ld256(p.add(2))
    }
}

#[inline(always)]
unsafe fn iq4nl_table() -> __m256i {
    let t = _mm_loadu_si128(IQ4NL_VALUES.as_ptr() as *const __m128i);
    _mm256_set_m128i(t, t)
}

impl Q32 for Iq4Nl {
    const WB: usize = IQ4_NL_BYTES;
    const AB: usize = Q8_0_BYTES;
    const SIGNED: bool = true;
    const OFF: i8 = 0;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> __m256i {
        _mm256_shuffle_epi8(iq4nl_table(), nibbles32(p.add(2)))
    }
}

/// Prefetches into L2, for each of the `R` rows a row kernel reads (stride `ws` bytes from `w`),
/// the lines of bytes `off..off + bytes` of the row `R` rows further on: the rows the next call
/// of [`run_rows`] reads, one group ahead, spread evenly over this group's blocks. Without it the
/// row kernels waited on memory: with four short row streams at a time the hardware prefetcher
/// kept too few reads in flight (Q4_0 decode on the AVX2 tier read 10 GB/s, `perf` showing the
/// time on the first use of each row's block). Past a matrix's end the prefetches are wasted,
/// never wrong (they do not fault).
///
/// One prefetch per 64 bytes counted back from the block's last byte: that reaches every line
/// the block ends in or crosses, and its first line, if not reached, is the previous block's
/// last. Straight-line code with a constant count per block, because for Q4_0's 18-byte blocks
/// working out the lines not asked for yet cost about as much as the block's dot products.
#[inline(always)]
unsafe fn prefetch_next_rows<const R: usize>(w: *const u8, ws: usize, off: usize, bytes: usize) {
    if R == 1 {
        return;
    }
    for r in 0..R {
        let last = w.wrapping_add((R + r) * ws + off + bytes - 1);
        for k in 0..bytes.div_ceil(64) {
            _mm_prefetch::<_MM_HINT_T1>(last.wrapping_sub(64 * k) as *const i8);
        }
    }
}

/// `R` weight rows (stride `ws` bytes) of `nb` blocks dotted with one activation row.
#[inline(always)]
unsafe fn q32_rows<T: Q32, D: IDot, const R: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    a: *const u8,
) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let mut accm = [0f32; R];
    for i in 0..nb {
        prefetch_next_rows::<R>(w, ws, i * T::WB, T::WB);
        let ap = a.add(i * T::AB);
        let av = ld256(ap.add(T::AB - 32));
        let da = ld_f16(ap);
        let corr = if !T::SIGNED && T::OFF != 0 {
            _mm256_sub_epi32(
                _mm256_setzero_si256(),
                D::dpbusd(_mm256_setzero_si256(), _mm256_set1_epi8(T::OFF), av),
            )
        } else {
            _mm256_setzero_si256()
        };
        for r in 0..R {
            let wp = w.add(r * ws + i * T::WB);
            let q = T::quants(wp);
            let s = if T::SIGNED {
                dot_ss::<D>(corr, q, av)
            } else {
                D::dpbusd(corr, q, av)
            };
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(ld_f16(wp) * da), _mm256_cvtepi32_ps(s), acc[r]);
            if T::MIN {
                accm[r] += ld_f16(wp.add(2)) * ld_f16(ap.add(2));
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_ps(acc[r]) + accm[r];
    }
    out
}

// ---------------------------------------------------------------------------------------------
// K-quants and IQ4_XS against Q8_K activations (d: f32, qs: 256 i8, bsums: 16 i16).

#[inline(always)]
unsafe fn q8k_parts(a: *const u8, i: usize) -> (f32, *const u8, *const u8) {
    let p = a.add(i * Q8_K_BYTES);
    (ld_f32(p), p.add(4), p.add(260))
}

/// The 16 bsums summed in adjacent pairs: the 8 sums of the sub-blocks of 32, as i16 (each at
/// most 32 * 127 in magnitude).
#[inline(always)]
unsafe fn bsums32(bs: *const u8) -> __m128i {
    _mm_hadd_epi16(ld128(bs), ld128(bs.add(16)))
}

/// Q4_K / Q5_K scales and mins (6 bits each, 12 bytes) as bytes 0..8 (scales) and 8..16 (mins)
/// of one vector: ggml's word-wise unpacking, a few integer operations for all 16 (the same
/// values as [`crate::quant::blocks::scale_min_k4`]).
#[inline(always)]
unsafe fn k4_scales(p: *const u8) -> __m128i {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let u = |i: usize| (p.add(4 * i) as *const u32).read_unaligned();
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let sc_lo = u0 & KMASK1;
    let sc_hi = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let m_lo = u1 & KMASK1;
    let m_hi = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    _mm_setr_epi32(sc_lo as i32, sc_hi as i32, m_lo as i32, m_hi as i32)
}

/// The `pshufb` control pair that picks i16 lane `k` (its two bytes) of a 128-bit half.
const fn lane16(k: usize) -> i16 {
    (2 * k as i16) | ((2 * k as i16 + 1) << 8)
}

/// Broadcasts i16 lane `k` of each 128-bit half of `v` over that half (`k` < 8).
#[inline(always)]
unsafe fn bcast_i16(v: __m256i, k: usize) -> __m256i {
    _mm256_shuffle_epi8(v, _mm256_set1_epi16(lane16(k)))
}

/// The 16 sub-block scales of a 16-element-sub-block K-quant (Q2_K, Q3_K, Q6_K) as i16, laid
/// out for [`Scales16::pair`].
#[derive(Clone, Copy)]
struct Scales16 {
    /// All 16, in order (for the offset or minimum sums against the bsums).
    all: __m256i,
    /// Scales 0..8 in both halves, and 8..16 in both halves.
    lo: __m256i,
    hi: __m256i,
}

impl Scales16 {
    #[inline(always)]
    unsafe fn new(all: __m256i) -> Scales16 {
        Scales16 {
            all,
            lo: _mm256_permute2x128_si256(all, all, 0x00),
            hi: _mm256_permute2x128_si256(all, all, 0x11),
        }
    }
    /// `[s[k]; 8] ++ [s[k+1]; 8]` (`k` even): the scales of two adjacent sub-blocks over the
    /// 32 values one step dots.
    #[inline(always)]
    unsafe fn pair(&self, k: usize) -> __m256i {
        let (src, kk) = if k < 8 { (self.lo, k) } else { (self.hi, k - 8) };
        _mm256_shuffle_epi8(
            src,
            _mm256_set_m128i(_mm_set1_epi16(lane16(kk + 1)), _mm_set1_epi16(lane16(kk))),
        )
    }
    /// `Σ_j s_j · bsum_j` in 8 i32 lanes (pairs of sub-blocks).
    #[inline(always)]
    unsafe fn dot_bsums(&self, bs: *const u8) -> __m256i {
        _mm256_madd_epi16(self.all, ld256(bs))
    }
}

/// Q4_K / Q5_K rows. Per row and super-block the scale work is vector code: the 12 scale bytes
/// unpacked word-wise, the minimum term as one `madd` of the 8 mins with the bsums into a float
/// vector, each sub-block's scale broadcast by a shuffle. Done per row in scalar code (the
/// former way) it was as much work as the dot products: AVX2 decode of the 1.1B Q4_K_M file ran
/// at half llama.cpp's AVX2 speed on one thread, compute bound.
#[inline(always)]
unsafe fn q45k_rows<D: IDot, const Q5: bool, const R: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    a: *const u8,
) -> [f32; R] {
    let wb = if Q5 { Q5_K_BYTES } else { Q4_K_BYTES };
    let qs_off = if Q5 { 48 } else { 16 };
    let mut acc = [_mm256_setzero_ps(); R];
    let mut accm = [_mm_setzero_ps(); R];
    let m4 = _mm256_set1_epi8(0x0f);
    for i in 0..nb {
        prefetch_next_rows::<R>(w, ws, i * wb, wb);
        let (da, q8, bs) = q8k_parts(a, i);
        let b32 = bsums32(bs);
        let mut sc = [_mm256_setzero_si256(); R];
        let mut sumi = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let wp = w.add(r * ws + i * wb);
            let sm = k4_scales(wp.add(4));
            let s16 = _mm_cvtepu8_epi16(sm);
            sc[r] = _mm256_set_m128i(s16, s16);
            let mins = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128::<8>(sm)), b32);
            accm[r] = _mm_fmadd_ps(
                _mm_set1_ps(ld_f16(wp.add(2)) * da),
                _mm_cvtepi32_ps(mins),
                accm[r],
            );
        }
        for c in 0..4 {
            let a_lo = ld256(q8.add(64 * c));
            let a_hi = ld256(q8.add(64 * c + 32));
            for r in 0..R {
                let wp = w.add(r * ws + i * wb);
                let q = ld256(wp.add(qs_off + 32 * c));
                let mut lo = _mm256_and_si256(q, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if Q5 {
                    let qh = ld256(wp.add(16));
                    let one = _mm256_set1_epi8(1);
                    let hl = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c as i32)), one);
                    let hh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c as i32 + 1)), one);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(hl, 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(hh, 4));
                }
                sumi[r] = D::dpwssd(sumi[r], maddubs(lo, a_lo), bcast_i16(sc[r], 2 * c));
                sumi[r] = D::dpwssd(sumi[r], maddubs(hi, a_hi), bcast_i16(sc[r], 2 * c + 1));
            }
        }
        for r in 0..R {
            let wp = w.add(r * ws + i * wb);
            acc[r] = _mm256_fmadd_ps(
                _mm256_set1_ps(ld_f16(wp) * da),
                _mm256_cvtepi32_ps(sumi[r]),
                acc[r],
            );
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        let m = accm[r];
        let m = _mm_add_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[r] = hsum_ps(acc[r]) - _mm_cvtss_f32(m);
    }
    out
}

#[inline(always)]
unsafe fn q6k_rows<D: IDot, const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    for i in 0..nb {
        prefetch_next_rows::<R>(w, ws, i * Q6_K_BYTES, Q6_K_BYTES);
        let (da, q8, bs) = q8k_parts(a, i);
        let mut sc = [Scales16::new(_mm256_setzero_si256()); R];
        let mut sumi = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let wp = w.add(r * ws + i * Q6_K_BYTES);
            sc[r] = Scales16::new(_mm256_cvtepi8_epi16(ld128(wp.add(192))));
            // The values are stored plus 32: the sum starts at -32 Σ_j s_j bsum_j.
            sumi[r] = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32::<5>(sc[r].dot_bsums(bs)),
            );
        }
        for h in 0..2 {
            let a0 = ld256(q8.add(128 * h));
            let a1 = ld256(q8.add(128 * h + 32));
            let a2 = ld256(q8.add(128 * h + 64));
            let a3 = ld256(q8.add(128 * h + 96));
            for r in 0..R {
                let wp = w.add(r * ws + i * Q6_K_BYTES);
                let l0 = ld256(wp.add(64 * h));
                let l1 = ld256(wp.add(64 * h + 32));
                let qh = ld256(wp.add(128 + 32 * h));
                // Bit pair k of each qh byte goes to bits 4-5 with one shift (16-bit, the mask
                // keeps what stayed within its byte) and one mask.
                let q0 = _mm256_or_si256(
                    _mm256_and_si256(l0, m4),
                    _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30),
                );
                let q1 = _mm256_or_si256(
                    _mm256_and_si256(l1, m4),
                    _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30),
                );
                let q2 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                    _mm256_and_si256(qh, m30),
                );
                let q3 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
                );
                let s = &sc[r];
                sumi[r] = D::dpwssd(sumi[r], maddubs(q0, a0), s.pair(8 * h));
                sumi[r] = D::dpwssd(sumi[r], maddubs(q1, a1), s.pair(8 * h + 2));
                sumi[r] = D::dpwssd(sumi[r], maddubs(q2, a2), s.pair(8 * h + 4));
                sumi[r] = D::dpwssd(sumi[r], maddubs(q3, a3), s.pair(8 * h + 6));
            }
        }
        for r in 0..R {
            let wp = w.add(r * ws + i * Q6_K_BYTES);
            acc[r] = _mm256_fmadd_ps(
                _mm256_set1_ps(ld_f16(wp.add(208)) * da),
                _mm256_cvtepi32_ps(sumi[r]),
                acc[r],
            );
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_ps(acc[r]);
    }
    out
}

#[inline(always)]
unsafe fn q3k_rows<D: IDot, const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let m3 = _mm256_set1_epi8(0x03);
    let one = _mm256_set1_epi8(1);
    for i in 0..nb {
        prefetch_next_rows::<R>(w, ws, i * Q3_K_BYTES, Q3_K_BYTES);
        let (da, q8, bs) = q8k_parts(a, i);
        let mut sc = [Scales16::new(_mm256_setzero_si256()); R];
        let mut sumi = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let wp = w.add(r * ws + i * Q3_K_BYTES);
            let s = q3_k_scales(&*(wp.add(96) as *const [u8; 12]));
            sc[r] = Scales16::new(_mm256_cvtepi8_epi16(ld128(s.as_ptr() as *const u8)));
            // The values are stored plus 4: the sum starts at -4 Σ_j s_j bsum_j.
            sumi[r] = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32::<2>(sc[r].dot_bsums(bs)),
            );
        }
        for h in 0..2 {
            for j in 0..4 {
                let av = ld256(q8.add(128 * h + 32 * j));
                for r in 0..R {
                    let wp = w.add(r * ws + i * Q3_K_BYTES);
                    let qs = ld256(wp.add(32 + 32 * h));
                    let hm = ld256(wp);
                    let lo = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * j as i32)), m3);
                    let hb =
                        _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128((4 * h + j) as i32)), one);
                    let q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
                    sumi[r] = D::dpwssd(sumi[r], maddubs(q, av), sc[r].pair(8 * h + 2 * j));
                }
            }
        }
        for r in 0..R {
            let wp = w.add(r * ws + i * Q3_K_BYTES);
            acc[r] = _mm256_fmadd_ps(
                _mm256_set1_ps(ld_f16(wp.add(108)) * da),
                _mm256_cvtepi32_ps(sumi[r]),
                acc[r],
            );
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_ps(acc[r]);
    }
    out
}

#[inline(always)]
unsafe fn q2k_rows<D: IDot, const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let mut accm = [_mm256_setzero_ps(); R];
    let m3 = _mm256_set1_epi8(0x03);
    for i in 0..nb {
        prefetch_next_rows::<R>(w, ws, i * Q2_K_BYTES, Q2_K_BYTES);
        let (da, q8, bs) = q8k_parts(a, i);
        let mut sc = [Scales16::new(_mm256_setzero_si256()); R];
        let mut sumi = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let wp = w.add(r * ws + i * Q2_K_BYTES);
            // Scale in the low nibble of each of the 16 bytes, minimum in the high one.
            let b = ld128(wp);
            let m15 = _mm_set1_epi8(15);
            sc[r] = Scales16::new(_mm256_cvtepu8_epi16(_mm_and_si128(b, m15)));
            let mins = Scales16::new(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(b), m15)));
            accm[r] = _mm256_fmadd_ps(
                _mm256_set1_ps(ld_f16(wp.add(82)) * da),
                _mm256_cvtepi32_ps(mins.dot_bsums(bs)),
                accm[r],
            );
        }
        for h in 0..2 {
            for j in 0..4 {
                let av = ld256(q8.add(128 * h + 32 * j));
                for r in 0..R {
                    let wp = w.add(r * ws + i * Q2_K_BYTES);
                    let qs = ld256(wp.add(16 + 32 * h));
                    let q = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * j as i32)), m3);
                    sumi[r] = D::dpwssd(sumi[r], maddubs(q, av), sc[r].pair(8 * h + 2 * j));
                }
            }
        }
        for r in 0..R {
            let wp = w.add(r * ws + i * Q2_K_BYTES);
            acc[r] = _mm256_fmadd_ps(
                _mm256_set1_ps(ld_f16(wp.add(80)) * da),
                _mm256_cvtepi32_ps(sumi[r]),
                acc[r],
            );
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_ps(acc[r]) - hsum_ps(accm[r]);
    }
    out
}

/// IQ4_XS sub-block `ib`'s scale (6 bits, minus 32).
#[inline(always)]
pub(super) unsafe fn iq4xs_scale(p: *const u8, ib: usize) -> i16 {
    let sh = (p.add(2) as *const u16).read_unaligned();
    let lo = (*p.add(4 + ib / 2) >> (4 * (ib % 2))) & 15;
    i16::from(lo | ((((sh >> (2 * ib)) & 3) as u8) << 4)) - 32
}

#[inline(always)]
unsafe fn iq4xs_rows<D: IDot, const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let table = iq4nl_table();
    for i in 0..nb {
        prefetch_next_rows::<R>(w, ws, i * IQ4_XS_BYTES, IQ4_XS_BYTES);
        let (da, q8, _) = q8k_parts(a, i);
        let mut sumi = [_mm256_setzero_si256(); R];
        for ib in 0..8 {
            let av = ld256(q8.add(32 * ib));
            for r in 0..R {
                let wp = w.add(r * ws + i * IQ4_XS_BYTES);
                let kv = _mm256_shuffle_epi8(table, nibbles32(wp.add(8 + 16 * ib)));
                let p = maddubs(_mm256_sign_epi8(kv, kv), _mm256_sign_epi8(av, kv));
                sumi[r] = D::dpwssd(sumi[r], p, _mm256_set1_epi16(iq4xs_scale(wp, ib)));
            }
        }
        for r in 0..R {
            let wp = w.add(r * ws + i * IQ4_XS_BYTES);
            acc[r] = _mm256_fmadd_ps(
                _mm256_set1_ps(ld_f16(wp) * da),
                _mm256_cvtepi32_ps(sumi[r]),
                acc[r],
            );
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_ps(acc[r]);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Float rows: tiles of rows x tokens, one token for decode ([`float_rows`]).

#[inline(always)]
unsafe fn bf16x8(p: *const u8) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(p)), 16))
}

#[inline(always)]
unsafe fn ld_bf16(p: *const u8) -> f32 {
    f32::from_bits(u32::from((p as *const u16).read_unaligned()) << 16)
}

#[inline(always)]
unsafe fn bf16x16(p: *const u8) -> __m512 {
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld256(p)), 16))
}

/// A float weight type's steps: [`float_tile`] runs each row and token through its chain of
/// multiply-adds, whatever the tile's size, so a batch gives decode's bits.
trait FloatSteps {
    /// A row and token's sum.
    type Acc: Copy;
    /// A step's weights or activations, loaded (and converted) once for all the tile's tokens
    /// or rows.
    type V: Copy;
    /// Elements per step.
    const STEP: usize;
    /// Bytes per element.
    const SIZE: usize;
    /// Whether the row kernel takes the elements past the last whole step in one masked step;
    /// otherwise it adds their products one by one after the reduction.
    const MASKED_TAIL: bool;
    unsafe fn zero() -> Self::Acc;
    unsafe fn reduce(acc: Self::Acc) -> f32;
    unsafe fn load(p: *const u8) -> Self::V;
    /// The first `k < STEP` elements, the rest zero (for a masked tail).
    unsafe fn load_part(_p: *const u8, _k: usize) -> Self::V {
        unreachable!("the tail is added element by element")
    }
    unsafe fn madd(acc: Self::Acc, w: Self::V, a: Self::V) -> Self::Acc;
    /// One element's product (for a tail that is not masked).
    unsafe fn product(_w: *const u8, _a: *const u8) -> f32 {
        unreachable!("masked tails")
    }
}

/// The 512-bit row kernels' sums: 16 lanes, reduced by `_mm512_reduce_add_ps`.
macro_rules! acc512 {
    () => {
        type Acc = __m512;
        #[inline(always)]
        unsafe fn zero() -> __m512 {
            _mm512_setzero_ps()
        }
        #[inline(always)]
        unsafe fn reduce(acc: __m512) -> f32 {
            _mm512_reduce_add_ps(acc)
        }
    };
}

/// The 256-bit row kernels' sums: 8 lanes, reduced by [`hsum_ps`], the tail added after.
macro_rules! acc256 {
    ($load:ident, $ld:ident, $size:expr) => {
        type Acc = __m256;
        type V = __m256;
        const STEP: usize = 8;
        const SIZE: usize = $size;
        const MASKED_TAIL: bool = false;
        #[inline(always)]
        unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn reduce(acc: __m256) -> f32 {
            hsum_ps(acc)
        }
        #[inline(always)]
        unsafe fn load(p: *const u8) -> __m256 {
            $load(p)
        }
        #[inline(always)]
        unsafe fn madd(acc: __m256, w: __m256, a: __m256) -> __m256 {
            _mm256_fmadd_ps(w, a, acc)
        }
        #[inline(always)]
        unsafe fn product(w: *const u8, a: *const u8) -> f32 {
            $ld(w) * $ld(a)
        }
    };
}

/// F32 weights, 16 lanes.
struct F32x16;
/// F16 weights, 16 lanes.
struct F16x16;
/// BF16 weights on AVX-512 CPUs without BF16 instructions, 16 lanes.
struct Bf16x16;
/// BF16 weights with `vdpbf16ps` (pairs of products accumulated in f32), 16 lanes.
struct Bf16Dp;
/// F32 weights, 8 lanes.
struct F32x8;
/// F16 weights, 8 lanes.
struct F16x8;
/// BF16 weights, 8 lanes.
struct Bf16x8;

impl FloatSteps for F32x16 {
    acc512!();
    type V = __m512;
    const STEP: usize = 16;
    const SIZE: usize = 4;
    const MASKED_TAIL: bool = true;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512 {
        _mm512_loadu_ps(p as *const f32)
    }
    #[inline(always)]
    unsafe fn load_part(p: *const u8, k: usize) -> __m512 {
        _mm512_maskz_loadu_ps(((1u32 << k) - 1) as u16, p as *const f32)
    }
    #[inline(always)]
    unsafe fn madd(acc: __m512, w: __m512, a: __m512) -> __m512 {
        _mm512_fmadd_ps(w, a, acc)
    }
}

impl FloatSteps for F16x16 {
    acc512!();
    type V = __m512;
    const STEP: usize = 16;
    const SIZE: usize = 2;
    const MASKED_TAIL: bool = true;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512 {
        _mm512_cvtph_ps(ld256(p))
    }
    #[inline(always)]
    unsafe fn load_part(p: *const u8, k: usize) -> __m512 {
        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
            ((1u32 << k) - 1) as u16,
            p as *const i16,
        ))
    }
    #[inline(always)]
    unsafe fn madd(acc: __m512, w: __m512, a: __m512) -> __m512 {
        _mm512_fmadd_ps(w, a, acc)
    }
}

impl FloatSteps for Bf16x16 {
    acc512!();
    type V = __m512;
    const STEP: usize = 16;
    const SIZE: usize = 2;
    const MASKED_TAIL: bool = false;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512 {
        bf16x16(p)
    }
    #[inline(always)]
    unsafe fn madd(acc: __m512, w: __m512, a: __m512) -> __m512 {
        _mm512_fmadd_ps(w, a, acc)
    }
    #[inline(always)]
    unsafe fn product(w: *const u8, a: *const u8) -> f32 {
        ld_bf16(w) * ld_bf16(a)
    }
}

impl FloatSteps for Bf16Dp {
    acc512!();
    type V = __m512bh;
    const STEP: usize = 32;
    const SIZE: usize = 2;
    const MASKED_TAIL: bool = true;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512bh {
        std::mem::transmute(_mm512_loadu_si512(p as *const _))
    }
    #[inline(always)]
    unsafe fn load_part(p: *const u8, k: usize) -> __m512bh {
        std::mem::transmute(_mm512_maskz_loadu_epi16(
            ((1u64 << k) - 1) as u32,
            p as *const i16,
        ))
    }
    #[inline(always)]
    unsafe fn madd(acc: __m512, w: __m512bh, a: __m512bh) -> __m512 {
        _mm512_dpbf16_ps(acc, w, a)
    }
}

#[inline(always)]
unsafe fn f32x8(p: *const u8) -> __m256 {
    _mm256_loadu_ps(p as *const f32)
}

#[inline(always)]
unsafe fn f16x8(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(ld128(p))
}

impl FloatSteps for F32x8 {
    acc256!(f32x8, ld_f32, 4);
}

impl FloatSteps for F16x8 {
    acc256!(f16x8, ld_f16, 2);
}

impl FloatSteps for Bf16x8 {
    acc256!(bf16x8, ld_bf16, 2);
}

/// `R` rows (from `w`, `ws` bytes apart) against `T` tokens (from `a`, `as_` bytes apart) into
/// `out[t * os + r]`: each row and token its own sum, with the row kernel's steps in its order.
/// A step's weights are loaded once for the `T` tokens and its activations once for the `R`
/// rows, where the row kernels read every row again for every token.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn float_tile<F: FloatSteps, const R: usize, const T: usize>(
    n: usize,
    w: *const u8,
    ws: usize,
    a: *const u8,
    as_: usize,
    out: *mut f32,
    os: usize,
) {
    let mut acc = [[F::zero(); T]; R];
    let whole = n / F::STEP * F::STEP;
    let mut i = 0;
    while i < whole {
        let mut wv = [F::load(w.add(F::SIZE * i)); R];
        for (r, wv) in wv.iter_mut().enumerate().skip(1) {
            *wv = F::load(w.add(r * ws + F::SIZE * i));
        }
        for t in 0..T {
            let av = F::load(a.add(t * as_ + F::SIZE * i));
            for r in 0..R {
                acc[r][t] = F::madd(acc[r][t], wv[r], av);
            }
        }
        i += F::STEP;
    }
    if whole < n && F::MASKED_TAIL {
        let k = n - whole;
        for t in 0..T {
            let av = F::load_part(a.add(t * as_ + F::SIZE * i), k);
            for r in 0..R {
                acc[r][t] = F::madd(acc[r][t], F::load_part(w.add(r * ws + F::SIZE * i), k), av);
            }
        }
    }
    for r in 0..R {
        for t in 0..T {
            let mut x = F::reduce(acc[r][t]);
            if !F::MASKED_TAIL {
                for k in whole..n {
                    x += F::product(w.add(r * ws + F::SIZE * k), a.add(t * as_ + F::SIZE * k));
                }
            }
            *out.add(t * os + r) = x;
        }
    }
}

/// `R` rows (from `w`, `ws` bytes apart) against one token's activations `a`: decode's row
/// kernel for float weights, a tile of one token.
#[inline(always)]
unsafe fn float_rows<F: FloatSteps, const R: usize>(
    n: usize,
    w: *const u8,
    ws: usize,
    a: *const u8,
) -> [f32; R] {
    let mut out = [0f32; R];
    float_tile::<F, R, 1>(n, w, ws, a, 0, out.as_mut_ptr(), 0);
    out
}

/// Weight bytes a batch works through at a time: they stay in L2 while every tile of tokens
/// reads them.
const FLOAT_BLOCK_BYTES: usize = 256 * 1024;

/// `out[t * os + r] = w_r · a_t` for `rows` rows from `w` (`ws` bytes apart) and `n_tokens`
/// tokens from `a` (`as_` bytes apart), in tiles of `R` rows x `T` tokens, with the bits of the
/// row kernels per token.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn float_batch<F: FloatSteps, const R: usize, const T: usize>(
    n: usize,
    w: *const u8,
    ws: usize,
    rows: usize,
    a: *const u8,
    as_: usize,
    n_tokens: usize,
    out: *mut f32,
    os: usize,
) {
    let block = (FLOAT_BLOCK_BYTES / ws).max(R) / R * R;
    let mut r0 = 0;
    while r0 < rows {
        let r1 = (r0 + block).min(rows);
        let mut t = 0;
        while t < n_tokens {
            let (at, ot) = (a.add(t * as_), out.add(t * os));
            let whole = t + T <= n_tokens;
            let mut r = r0;
            while r < r1 {
                let (wr, or) = (w.add(r * ws), ot.add(r));
                match (r + R <= r1, whole) {
                    (true, true) => float_tile::<F, R, T>(n, wr, ws, at, as_, or, os),
                    (true, false) => float_tile::<F, R, 1>(n, wr, ws, at, as_, or, os),
                    (false, true) => float_tile::<F, 1, T>(n, wr, ws, at, as_, or, os),
                    (false, false) => float_tile::<F, 1, 1>(n, wr, ws, at, as_, or, os),
                }
                r += if r + R <= r1 { R } else { 1 };
            }
            t += if whole { T } else { 1 };
        }
        r0 = r1;
    }
}

/// [`float_batch`] for float weight types (F32, F16, BF16) in tiles of `$tokens` tokens: the
/// batch counterpart of the row driver of the same features, with the same steps (`$f32`,
/// `$f16`, `$bf16`). 512-bit: 4 rows x 6 tokens of sums, 4 rows' weights and a token's
/// activations fill 29 of the 32 registers (3 x 8 and 6 x 4 were no faster); 256-bit: 3 x 4, 3
/// and 1 fill all 16 (4 x 2 was 3% slower on the 1.1B F16 file's prompt).
macro_rules! float_batch_driver {
    ($name:ident, $feat:literal, $rows:expr, $tokens:expr, $f32:ty, $f16:ty, $bf16:ty) => {
        /// # Safety
        /// The CPU has this function's features; `rows` rows of `n` values of `ty` at `w` (`ws`
        /// bytes apart), `n_tokens` activation rows of `ty`'s dot type at `a` (`as_` apart) and
        /// the outputs `out[t * os + r]` lie within their buffers.
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments)]
        pub(super) unsafe fn $name(
            ty: GgmlType,
            n: usize,
            w: *const u8,
            ws: usize,
            rows: usize,
            a: *const u8,
            as_: usize,
            n_tokens: usize,
            out: *mut f32,
            os: usize,
        ) {
            match ty {
                GgmlType::F32 => {
                    float_batch::<$f32, $rows, $tokens>(n, w, ws, rows, a, as_, n_tokens, out, os)
                }
                GgmlType::F16 => {
                    float_batch::<$f16, $rows, $tokens>(n, w, ws, rows, a, as_, n_tokens, out, os)
                }
                GgmlType::BF16 => {
                    float_batch::<$bf16, $rows, $tokens>(n, w, ws, rows, a, as_, n_tokens, out, os)
                }
                _ => unreachable!("{ty} is not a float type"),
            }
        }
    };
}

float_batch_driver!(float_batch_avx2, "avx2,fma,f16c", 3, 4, F32x8, F16x8, Bf16x8);
float_batch_driver!(
    float_batch_avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq",
    4,
    6,
    F32x16,
    F16x16,
    Bf16x16
);
float_batch_driver!(
    float_batch_avx512bf16,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16",
    4,
    6,
    F32x16,
    F16x16,
    Bf16Dp
);

// ---------------------------------------------------------------------------------------------
// Row-group driver: rows four at a time (four weight streams share each activation load), the
// remainder one at a time.

/// Runs a row kernel over `out.len()` rows: four at a time, then one at a time.
macro_rules! run_rows {
    ($out:ident, $w:ident, $ws:ident, $a:ident, $f:ident $(::<$($g:ty),*>)? ($nb:expr)) => {{
        let nr = $out.len();
        let mut r = 0;
        while r + 4 <= nr {
            let v = $f::<$($($g,)*)? 4>($nb, $w.add(r * $ws), $ws, $a);
            $out[r..r + 4].copy_from_slice(&v);
            r += 4;
        }
        while r < nr {
            $out[r] = $f::<$($($g,)*)? 1>($nb, $w.add(r * $ws), $ws, $a)[0];
            r += 1;
        }
    }};
}

#[inline(always)]
unsafe fn q4k_rows<D: IDot, const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    q45k_rows::<D, false, R>(nb, w, ws, a)
}

#[inline(always)]
unsafe fn q5k_rows<D: IDot, const R: usize>(nb: usize, w: *const u8, ws: usize, a: *const u8) -> [f32; R] {
    q45k_rows::<D, true, R>(nb, w, ws, a)
}

macro_rules! rows_driver {
    ($name:ident, $feat:literal, $d:ty, $f32:ty, $f16:ty, $bf16:ty) => {
        /// `out[r] = w_r · a` for the `out.len()` rows starting at `w` (stride `ws` bytes).
        #[target_feature(enable = $feat)]
        pub unsafe fn $name(ty: GgmlType, n: usize, w: *const u8, ws: usize, a: *const u8, out: &mut [f32]) {
            use GgmlType as T;
            match ty {
                T::F32 => run_rows!(out, w, ws, a, float_rows::<$f32>(n)),
                T::F16 => run_rows!(out, w, ws, a, float_rows::<$f16>(n)),
                T::BF16 => run_rows!(out, w, ws, a, float_rows::<$bf16>(n)),
                T::Q4_0 => run_rows!(out, w, ws, a, q32_rows::<Q4_0, $d>(n / 32)),
                T::Q4_1 => run_rows!(out, w, ws, a, q32_rows::<Q4_1, $d>(n / 32)),
                T::Q5_0 => run_rows!(out, w, ws, a, q32_rows::<Q5_0, $d>(n / 32)),
                T::Q5_1 => run_rows!(out, w, ws, a, q32_rows::<Q5_1, $d>(n / 32)),
                T::Q8_0 => run_rows!(out, w, ws, a, q32_rows::<Q8_0, $d>(n / 32)),
                T::IQ4_NL => run_rows!(out, w, ws, a, q32_rows::<Iq4Nl, $d>(n / 32)),
                T::Q2_K => run_rows!(out, w, ws, a, q2k_rows::<$d>(n / 256)),
                T::Q3_K => run_rows!(out, w, ws, a, q3k_rows::<$d>(n / 256)),
                T::Q4_K => run_rows!(out, w, ws, a, q4k_rows::<$d>(n / 256)),
                T::Q5_K => run_rows!(out, w, ws, a, q5k_rows::<$d>(n / 256)),
                T::Q6_K => run_rows!(out, w, ws, a, q6k_rows::<$d>(n / 256)),
                T::IQ4_XS => run_rows!(out, w, ws, a, iq4xs_rows::<$d>(n / 256)),
                _ => unreachable!("no kernel for {ty}"),
            }
        }
    };
}

rows_driver!(dot_rows_avx2, "avx2,fma,f16c", Avx2, F32x8, F16x8, Bf16x8);
rows_driver!(
    dot_rows_avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    Vnni,
    F32x16,
    F16x16,
    Bf16x16
);
rows_driver!(
    dot_rows_avx512bf16,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16",
    Vnni,
    F32x16,
    F16x16,
    Bf16Dp
);

// ---------------------------------------------------------------------------------------------
// Activation quantization, bit-identical to the scalar references.

/// Four vectors of 8 i32 (each in -128..=127) as 32 bytes in order.
#[inline(always)]
unsafe fn pack_i32x32(i0: __m256i, i1: __m256i, i2: __m256i, i3: __m256i) -> __m256i {
    let a = _mm256_packs_epi32(i0, i1);
    let b = _mm256_packs_epi32(i2, i3);
    let c = _mm256_packs_epi16(a, b);
    _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

#[inline(always)]
unsafe fn amax32(x: *const f32) -> f32 {
    let abs = _mm256_set1_ps(-0.0);
    let mut m = _mm256_andnot_ps(abs, _mm256_loadu_ps(x));
    for k in 1..4 {
        m = _mm256_max_ps(m, _mm256_andnot_ps(abs, _mm256_loadu_ps(x.add(8 * k))));
    }
    let s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_max_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Quantizes one 32-block to `out` (32 bytes) as llama.cpp's SIMD code does (`x * 127/amax`,
/// rounded half to even); returns the f32 scale and the sum of the quants.
#[inline(always)]
unsafe fn q8_block(x: *const f32, out: *mut u8) -> (f32, i32) {
    let amax = amax32(x);
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
    let mut q = [_mm256_setzero_si256(); 4];
    for (k, qk) in q.iter_mut().enumerate() {
        // cvtps rounds to nearest even (the default MXCSR mode).
        *qk = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x.add(8 * k)), id));
    }
    let sum = hsum_epi32(_mm256_add_epi32(
        _mm256_add_epi32(q[0], q[1]),
        _mm256_add_epi32(q[2], q[3]),
    ));
    _mm256_storeu_si256(out as *mut __m256i, pack_i32x32(q[0], q[1], q[2], q[3]));
    (d, sum)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (x, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let (d, _) = q8_block(x.as_ptr(), y.as_mut_ptr().add(2));
        y[..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_1(x: &[f32], out: &mut [u8]) {
    for (x, y) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
        let (d, sum) = q8_block(x.as_ptr(), y.as_mut_ptr().add(4));
        y[..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
        y[2..4].copy_from_slice(&half::f16::from_f32(sum as f32 * d).to_bits().to_le_bytes());
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    let absmask = _mm256_set1_ps(-0.0);
    for (x, y) in x.chunks_exact(256).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let xp = x.as_ptr();
        let mut m = _mm256_setzero_ps();
        for k in 0..32 {
            m = _mm256_max_ps(m, _mm256_andnot_ps(absmask, _mm256_loadu_ps(xp.add(8 * k))));
        }
        let s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        let amax = _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
        if amax == 0.0 {
            y.fill(0);
            continue;
        }
        // The reference keeps the first element of largest magnitude, with its sign.
        let va = _mm256_set1_ps(amax);
        let mut max = 0.0;
        for k in 0..32 {
            let eq = _mm256_cmp_ps(
                _mm256_andnot_ps(absmask, _mm256_loadu_ps(xp.add(8 * k))),
                va,
                _CMP_EQ_OQ,
            );
            let bits = _mm256_movemask_ps(eq);
            if bits != 0 {
                max = x[8 * k + bits.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let vs = _mm256_set1_ps(iscale);
        let top = _mm256_set1_epi32(127);
        let yq = y.as_mut_ptr().add(4);
        let bsums = y.as_mut_ptr().add(260) as *mut i16;
        for b in 0..8 {
            let mut q = [_mm256_setzero_si256(); 4];
            for (k, qk) in q.iter_mut().enumerate() {
                let v = _mm256_mul_ps(_mm256_loadu_ps(xp.add(32 * b + 8 * k)), vs);
                // cvtps rounds to nearest even, as the reference's magic-number rounding.
                *qk = _mm256_min_epi32(_mm256_cvtps_epi32(v), top);
            }
            let s01 = hsum_epi32(_mm256_add_epi32(q[0], q[1]));
            let s23 = hsum_epi32(_mm256_add_epi32(q[2], q[3]));
            bsums.add(2 * b).write_unaligned(s01 as i16);
            bsums.add(2 * b + 1).write_unaligned(s23 as i16);
            _mm256_storeu_si256(
                yq.add(32 * b) as *mut __m256i,
                pack_i32x32(q[0], q[1], q[2], q[3]),
            );
        }
        y[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// [`quantize_q8_k`] on 16-lane vectors: the block's signed maximum and minimum taken with its
/// magnitude, so only a block holding both `+amax` and `-amax` looks for the first of them;
/// the 16 sums of 16 quants added in one transposing tree (46 instructions) rather than one
/// horizontal sum each. The same bytes
/// (`activation_quantization_is_the_reference_on_every_tier`).
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL/DQ; `out` holds `x.len() / 256` Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub unsafe fn quantize_q8_k_avx512(x: &[f32], out: &mut [u8]) {
    for (x, y) in x.chunks_exact(256).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let xp = x.as_ptr();
        let (mut m, mut hi, mut lo) = (_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps());
        for k in 0..16 {
            let v = _mm512_loadu_ps(xp.add(16 * k));
            m = _mm512_max_ps(m, _mm512_abs_ps(v));
            hi = _mm512_max_ps(hi, v);
            lo = _mm512_min_ps(lo, v);
        }
        let amax = _mm512_reduce_max_ps(m);
        if amax == 0.0 {
            y.fill(0);
            continue;
        }
        // The reference keeps the first element of largest magnitude, with its sign.
        let (top, bottom) = (_mm512_reduce_max_ps(hi), _mm512_reduce_min_ps(lo));
        let max = if top != amax {
            bottom
        } else if -bottom != amax {
            top
        } else {
            let va = _mm512_set1_ps(amax);
            let mut first = top;
            for k in 0..16 {
                let eq = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(_mm512_loadu_ps(xp.add(16 * k))), va);
                if eq != 0 {
                    first = x[16 * k + eq.trailing_zeros() as usize];
                    break;
                }
            }
            first
        };
        let iscale = -127.0 / max;
        let vs = _mm512_set1_ps(iscale);
        let q_max = _mm512_set1_epi32(127);
        let yq = y.as_mut_ptr().add(4);
        let mut q = [_mm512_setzero_si512(); 16];
        for (k, qk) in q.iter_mut().enumerate() {
            // cvtps rounds to nearest even, as the reference's magic-number rounding.
            let v = _mm512_mul_ps(_mm512_loadu_ps(xp.add(16 * k)), vs);
            *qk = _mm512_min_epi32(_mm512_cvtps_epi32(v), q_max);
            _mm_storeu_si128(yq.add(16 * k) as *mut __m128i, _mm512_cvtepi32_epi8(*qk));
        }
        // Sums of the 16 vectors: pairs interleaved within 128-bit lanes, then quads, then
        // the four lanes folded, leaving sum `j` in lane `j`.
        let mut t = [_mm512_setzero_si512(); 8];
        for (i, t) in t.iter_mut().enumerate() {
            let (a, b) = (q[2 * i], q[2 * i + 1]);
            *t = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
        }
        let mut u = [_mm512_setzero_si512(); 4];
        for (i, u) in u.iter_mut().enumerate() {
            let (c, d) = (t[2 * i], t[2 * i + 1]);
            *u = _mm512_add_epi32(_mm512_unpacklo_epi64(c, d), _mm512_unpackhi_epi64(c, d));
        }
        // A nested fn, not a closure: it must get this function's target features inlined.
        #[inline(always)]
        unsafe fn fold(e: __m512i, f: __m512i) -> __m512i {
            _mm512_add_epi32(
                _mm512_shuffle_i32x4::<0b10_00_10_00>(e, f),
                _mm512_shuffle_i32x4::<0b11_01_11_01>(e, f),
            )
        }
        let sums = fold(fold(u[0], u[1]), fold(u[2], u[3]));
        _mm256_storeu_si256(
            y.as_mut_ptr().add(260) as *mut __m256i,
            _mm512_cvtepi32_epi16(sums),
        );
        y[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_f16(x: &[f32], out: &mut [u8]) {
    let n8 = x.len() / 8 * 8;
    for i in (0..n8).step_by(8) {
        let h = _mm256_cvtps_ph(_mm256_loadu_ps(x.as_ptr().add(i)), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(out.as_mut_ptr().add(2 * i) as *mut __m128i, h);
    }
    for (v, o) in x[n8..].iter().zip(out[2 * n8..].chunks_exact_mut(2)) {
        o.copy_from_slice(&half::f16::from_f32(*v).to_bits().to_le_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// GEMM micro-kernels over an expanded panel (see `gemm.rs`): 16 rows x C tokens per pass.

use super::gemm::{Tile, PANEL_ROWS};

/// AVX-512 VNNI: values biased by +128 (unsigned), so each sub-block's integer sum starts at
/// `-128 * Σa` and one `vpdpbusd` per step and token covers the 16 rows.
#[inline(always)]
unsafe fn gemm_tile512<const C: usize, const SUB: usize, const MIN: bool>(
    g: &Tile,
    t0: usize,
    out: *mut f32,
    os: usize,
    mask: __mmask16,
) {
    let p = g.panel;
    let n_sub = p.n_sub;
    let vals = p.vals.as_ptr() as *const u8;
    let (sd, so, sm) = (g.side.d.as_ptr(), g.side.osum.as_ptr(), g.side.msum.as_ptr());
    let steps = SUB / 4;
    let mut accf = [_mm512_setzero_ps(); C];
    let mut arow = [std::ptr::null::<u8>(); C];
    for c in 0..C {
        arow[c] = g.xq.as_ptr().add((t0 + c) * g.row_bytes);
    }
    for j in 0..n_sub {
        let mut acci = [_mm512_setzero_si512(); C];
        for c in 0..C {
            acci[c] = _mm512_set1_epi32(*so.add((t0 + c) * n_sub + j));
        }
        let qo = *g.side.qoff.get_unchecked(j) as usize;
        let wp = vals.add(j * steps * 64);
        for k in 0..steps {
            let wv = _mm512_loadu_si512(wp.add(64 * k) as *const _);
            for c in 0..C {
                let a = (arow[c].add(qo + 4 * k) as *const i32).read_unaligned();
                acci[c] = _mm512_dpbusd_epi32(acci[c], wv, _mm512_set1_epi32(a));
            }
        }
        let ws = _mm512_loadu_ps(p.scales.as_ptr().add(j * PANEL_ROWS));
        for c in 0..C {
            let d = _mm512_set1_ps(*sd.add((t0 + c) * n_sub + j));
            accf[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[c]), _mm512_mul_ps(ws, d), accf[c]);
        }
        if MIN {
            let wm = _mm512_loadu_ps(p.mins.as_ptr().add(j * PANEL_ROWS));
            for c in 0..C {
                accf[c] = _mm512_fmadd_ps(wm, _mm512_set1_ps(*sm.add((t0 + c) * n_sub + j)), accf[c]);
            }
        }
    }
    for c in 0..C {
        _mm512_mask_storeu_ps(out.add((t0 + c) * os), mask, accf[c]);
    }
}

/// AVX2: eight rows per vector (the panel's two halves in turn). Signed values (`G == 0`) go
/// through the sign trick into `maddubs` + `madd`. Small unsigned ones ([`Expansion::unsigned`],
/// `G` > 0: Q4_0, Q6_K, the K-quants…) multiply the activations directly, and `G` steps'
/// `maddubs` pair sums are added in i16 before one `madd` widens them: per token and step
/// about 2 operations instead of 4 (the sum starts at the offset sum `-off · Σa`). Either way
/// the sub-block's integer sum is exact.
#[inline(always)]
unsafe fn gemm_tile256<const C: usize, const SUB: usize, const MIN: bool, const G: usize>(
    g: &Tile,
    t0: usize,
    half: usize,
    out: *mut f32,
    os: usize,
    rows: usize,
) {
    let p = g.panel;
    let n_sub = p.n_sub;
    let vals = (p.vals.as_ptr() as *const u8).add(32 * half);
    let (sd, sm, so) = (g.side.d.as_ptr(), g.side.msum.as_ptr(), g.side.osum.as_ptr());
    let steps = SUB / 4;
    let ones = _mm256_set1_epi16(1);
    let mut accf = [_mm256_setzero_ps(); C];
    let mut arow = [std::ptr::null::<u8>(); C];
    for c in 0..C {
        arow[c] = g.xq.as_ptr().add((t0 + c) * g.row_bytes);
    }
    for j in 0..n_sub {
        let mut acci = [_mm256_setzero_si256(); C];
        let qo = *g.side.qoff.get_unchecked(j) as usize;
        let wp = vals.add(j * steps * 64);
        // Token `c`'s four activations of step `k`, in every lane.
        macro_rules! a {
            ($c:expr, $k:expr) => {
                _mm256_set1_epi32((arow[$c].add(qo + 4 * $k) as *const i32).read_unaligned())
            };
        }
        if G == 0 {
            for k in 0..steps {
                let wv = _mm256_loadu_si256(wp.add(64 * k) as *const __m256i);
                let wabs = _mm256_sign_epi8(wv, wv);
                for c in 0..C {
                    let prod = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a!(c, k), wv));
                    acci[c] = _mm256_add_epi32(acci[c], _mm256_madd_epi16(prod, ones));
                }
            }
        } else {
            for c in 0..C {
                acci[c] = _mm256_set1_epi32(*so.add((t0 + c) * n_sub + j));
            }
            for k0 in (0..steps).step_by(G) {
                let mut p16 = [_mm256_setzero_si256(); C];
                for k in k0..k0 + G {
                    let wv = _mm256_loadu_si256(wp.add(64 * k) as *const __m256i);
                    for c in 0..C {
                        p16[c] = _mm256_add_epi16(p16[c], _mm256_maddubs_epi16(wv, a!(c, k)));
                    }
                }
                for c in 0..C {
                    acci[c] = _mm256_add_epi32(acci[c], _mm256_madd_epi16(p16[c], ones));
                }
            }
        }
        let ws = _mm256_loadu_ps(p.scales.as_ptr().add(j * PANEL_ROWS + 8 * half));
        for c in 0..C {
            let d = _mm256_set1_ps(*sd.add((t0 + c) * n_sub + j));
            accf[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acci[c]), _mm256_mul_ps(ws, d), accf[c]);
        }
        if MIN {
            let wm = _mm256_loadu_ps(p.mins.as_ptr().add(j * PANEL_ROWS + 8 * half));
            for c in 0..C {
                accf[c] = _mm256_fmadd_ps(wm, _mm256_set1_ps(*sm.add((t0 + c) * n_sub + j)), accf[c]);
            }
        }
    }
    for c in 0..C {
        let dst = out.add((t0 + c) * os + 8 * half);
        if rows >= 8 {
            _mm256_storeu_ps(dst, accf[c]);
        } else {
            let mut tmp = [0f32; 8];
            _mm256_storeu_ps(tmp.as_mut_ptr(), accf[c]);
            std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, rows);
        }
    }
}

macro_rules! gemm_driver {
    ($name:ident, $feat:literal, $body:ident) => {
        /// Tokens `tokens` of the batch against the panel: `out[t * os + r]` for `r < rows`.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn $name(
            g: &Tile,
            tokens: std::ops::Range<usize>,
            out: *mut f32,
            os: usize,
            rows: usize,
        ) {
            match (g.e.sub, g.e.has_min) {
                (32, false) => $body::<32, false>(g, tokens, out, os, rows),
                (32, true) => $body::<32, true>(g, tokens, out, os, rows),
                (16, false) => $body::<16, false>(g, tokens, out, os, rows),
                _ => $body::<16, true>(g, tokens, out, os, rows),
            }
        }
    };
}

#[inline(always)]
unsafe fn gemm512_body<const SUB: usize, const MIN: bool>(
    g: &Tile,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
    rows: usize,
) {
    let mask: __mmask16 = if rows >= 16 {
        0xffff
    } else {
        ((1u32 << rows) - 1) as u16
    };
    let mut t = tokens.start;
    while t + 8 <= tokens.end {
        gemm_tile512::<8, SUB, MIN>(g, t, out, os, mask);
        t += 8;
    }
    if t + 4 <= tokens.end {
        gemm_tile512::<4, SUB, MIN>(g, t, out, os, mask);
        t += 4;
    }
    while t < tokens.end {
        gemm_tile512::<1, SUB, MIN>(g, t, out, os, mask);
        t += 1;
    }
}

#[inline(always)]
unsafe fn gemm256_body<const SUB: usize, const MIN: bool, const G: usize>(
    g: &Tile,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
    rows: usize,
) {
    for half in 0..2 {
        if rows <= 8 * half {
            break;
        }
        let hr = (rows - 8 * half).min(8);
        let mut t = tokens.start;
        while t + 4 <= tokens.end {
            gemm_tile256::<4, SUB, MIN, G>(g, t, half, out, os, hr);
            t += 4;
        }
        while t < tokens.end {
            gemm_tile256::<1, SUB, MIN, G>(g, t, half, out, os, hr);
            t += 1;
        }
    }
}

gemm_driver!(
    gemm_avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    gemm512_body
);
/// Tokens `tokens` of the batch against the panel: `out[t * os + r]` for `r < rows`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm_avx2(
    g: &Tile,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
    rows: usize,
) {
    // Every (sub-block size, minimum, i16 steps) that `expansion` gives.
    match (g.e.sub, g.e.has_min, g.e.i16_steps()) {
        (32, false, 0) => gemm256_body::<32, false, 0>(g, tokens, out, os, rows),
        (32, false, 8) => gemm256_body::<32, false, 8>(g, tokens, out, os, rows),
        (32, false, 4) => gemm256_body::<32, false, 4>(g, tokens, out, os, rows),
        (32, true, 8) => gemm256_body::<32, true, 8>(g, tokens, out, os, rows),
        (32, true, 4) => gemm256_body::<32, true, 4>(g, tokens, out, os, rows),
        (16, false, 2) => gemm256_body::<16, false, 2>(g, tokens, out, os, rows),
        (16, false, 4) => gemm256_body::<16, false, 4>(g, tokens, out, os, rows),
        (16, true, 4) => gemm256_body::<16, true, 4>(g, tokens, out, os, rows),
        (sub, min, steps) => unreachable!("no AVX2 GEMM for sub-blocks of {sub}, min {min}, {steps} steps"),
    }
}

// ---------------------------------------------------------------------------------------------
// Packed (16-row interleaved) weights, AVX-512 VNNI: see `packed.rs` for the layouts. One generic
// kernel for the 32-value block types; each says how to turn a tile into 64-byte steps of unsigned
// values (biased by OFF) and gives its rows' scales per block. The K-quants have their own
// super-block kernel (`SbType`, below).

use super::gemm::ActSide;

/// One packed type, as the AVX-512 kernel sees it.
pub(super) trait Pk512 {
    const TILE: usize;
    const SUBS: usize;
    const SUB: usize;
    /// Values are stored plus `OFF`: integer sums start at `-OFF * Σa`.
    const OFF: i32;
    /// Whether rows have a minimum (Q4_1, Q5_1: `w = d·q + m`), added as `m · s` with the
    /// token's `s = d·Σa` (`ActSide::msum`).
    const MIN: bool = false;
    type St: Copy;
    unsafe fn state(t: *const u8) -> Self::St;
    unsafe fn scale(st: &Self::St, j: usize) -> __m512;
    /// The rows' f32 minimums (with `MIN`).
    #[inline(always)]
    unsafe fn min(_t: *const u8) -> __m512 {
        _mm512_setzero_ps()
    }
    unsafe fn steps(t: *const u8, j: usize, w: &mut [__m512i; 8]);
}

#[inline(always)]
unsafe fn ld512(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p as *const _)
}

#[inline(always)]
unsafe fn d16(t: *const u8) -> __m512 {
    _mm512_cvtph_ps(ld256(t))
}

/// Nibble chunk at `p`: (low nibbles, high nibbles) as two steps.
#[inline(always)]
unsafe fn nib512(p: *const u8) -> (__m512i, __m512i) {
    let v = ld512(p);
    let m = _mm512_set1_epi8(0x0f);
    (
        _mm512_and_si512(v, m),
        _mm512_and_si512(_mm512_srli_epi16(v, 4), m),
    )
}

/// The state and scale of the 32-element block types: the rows' f16 `d` (`d[16]` first in the
/// tile) is the scale.
/// With `min`: and the rows' f16 minimums `m[16]` after them (Q4_1, Q5_1).
macro_rules! block_scale512 {
    () => {
        type St = __m512;
        #[inline(always)]
        unsafe fn state(t: *const u8) -> __m512 {
            d16(t)
        }
        #[inline(always)]
        unsafe fn scale(st: &__m512, _j: usize) -> __m512 {
            *st
        }
    };
    (min) => {
        block_scale512!();
        const MIN: bool = true;
        #[inline(always)]
        unsafe fn min(t: *const u8) -> __m512 {
            d16(t.add(32))
        }
    };
}

pub(super) struct PkQ8_0;
pub(super) struct PkQ4_0;
pub(super) struct PkQ4_1;
pub(super) struct PkQ5_0;
pub(super) struct PkQ5_1;
pub(super) struct PkIq4Nl;
pub(super) struct PkQ2K;
pub(super) struct PkQ3K;
pub(super) struct PkIq4Xs;
pub(super) struct PkQ4K;
pub(super) struct PkQ5K;
pub(super) struct PkQ6K;

impl Pk512 for PkQ8_0 {
    const TILE: usize = 544;
    const SUBS: usize = 1;
    const SUB: usize = 32;
    const OFF: i32 = 128;
    block_scale512!();
    #[inline(always)]
    unsafe fn steps(t: *const u8, _j: usize, w: &mut [__m512i; 8]) {
        let bias = _mm512_set1_epi8(i8::MIN);
        for k in 0..8 {
            w[k] = _mm512_xor_si512(ld512(t.add(32 + 64 * k)), bias);
        }
    }
}

impl Pk512 for PkQ4_0 {
    const TILE: usize = 288;
    const SUBS: usize = 1;
    const SUB: usize = 32;
    const OFF: i32 = 8;
    block_scale512!();
    #[inline(always)]
    unsafe fn steps(t: *const u8, _j: usize, w: &mut [__m512i; 8]) {
        for c in 0..4 {
            (w[2 * c], w[2 * c + 1]) = nib512(t.add(32 + 64 * c));
        }
    }
}

/// Q4_1: Q4_0's steps after `d[16]` and `m[16]`; values unsigned, no offset.
impl Pk512 for PkQ4_1 {
    const TILE: usize = 320;
    const SUBS: usize = 1;
    const SUB: usize = 32;
    const OFF: i32 = 0;
    block_scale512!(min);
    #[inline(always)]
    unsafe fn steps(t: *const u8, _j: usize, w: &mut [__m512i; 8]) {
        for c in 0..4 {
            (w[2 * c], w[2 * c + 1]) = nib512(t.add(64 + 64 * c));
        }
    }
}

impl Pk512 for PkQ5_0 {
    const TILE: usize = 352;
    const SUBS: usize = 1;
    const SUB: usize = 32;
    const OFF: i32 = 16;
    block_scale512!();
    #[inline(always)]
    unsafe fn steps(t: *const u8, _j: usize, w: &mut [__m512i; 8]) {
        q5_steps512(t.add(32), w);
    }
}

/// Q5_1: Q5_0's steps after `d[16]` and `m[16]`; values unsigned, no offset.
impl Pk512 for PkQ5_1 {
    const TILE: usize = 384;
    const SUBS: usize = 1;
    const SUB: usize = 32;
    const OFF: i32 = 0;
    block_scale512!(min);
    #[inline(always)]
    unsafe fn steps(t: *const u8, _j: usize, w: &mut [__m512i; 8]) {
        q5_steps512(t.add(64), w);
    }
}

/// The 8 steps of Q5_0's and Q5_1's 5-bit values from the 5th-bit masks at `p` and the nibble
/// chunks after them: each mask bit adds 16 to its byte.
#[inline(always)]
unsafe fn q5_steps512(p: *const u8, w: &mut [__m512i; 8]) {
    let hb = _mm512_set1_epi8(0x10);
    for c in 0..4 {
        (w[2 * c], w[2 * c + 1]) = nib512(p.add(64 + 64 * c));
    }
    for k in 0..8 {
        let m: __mmask64 = (p.add(8 * k) as *const u64).read_unaligned();
        w[k] = _mm512_mask_add_epi8(w[k], m, w[k], hb);
    }
}

/// IQ4_NL: Q4_0's tile holding indices into the IQ4_NL levels, looked up as the levels plus 128
/// (unsigned bytes for `vpdpbusd`; sums start at `-128 · Σa`).
impl Pk512 for PkIq4Nl {
    const TILE: usize = 288;
    const SUBS: usize = 1;
    const SUB: usize = 32;
    const OFF: i32 = 128;
    block_scale512!();
    #[inline(always)]
    unsafe fn steps(t: *const u8, _j: usize, w: &mut [__m512i; 8]) {
        iq4_steps512(t.add(32), w);
    }
}

/// The 8 steps of the four nibble chunks at `p` (IQ4_NL / IQ4_XS indices), each index looked up
/// (`vpshufb`) in the IQ4_NL levels plus 128: unsigned bytes for `vpdpbusd`.
#[inline(always)]
unsafe fn iq4_steps512(p: *const u8, w: &mut [__m512i; 8]) {
    let levels = _mm512_xor_si512(
        _mm512_broadcast_i32x4(_mm_loadu_si128(IQ4NL_VALUES.as_ptr() as *const __m128i)),
        _mm512_set1_epi8(0x80u8 as i8),
    );
    for c in 0..4 {
        let (lo, hi) = nib512(p.add(64 * c));
        w[2 * c] = _mm512_shuffle_epi8(levels, lo);
        w[2 * c + 1] = _mm512_shuffle_epi8(levels, hi);
    }
}

/// What the packed kernels read besides the group: the batch's activations and side data.
pub(super) struct PkArgs<'a> {
    pub n_tiles: usize,
    pub side: &'a ActSide,
    pub xq: &'a [u8],
    pub row_bytes: usize,
}

/// How far ahead of the tile being read a one-token pass prefetches. Out-of-cache decode GEMV
/// (`PACKED=1 kernel_bench 2 gemv`, 2 threads, busy machine) against 0 / 1024 / 2048 / 4096 /
/// 8192 bytes: Q4_0 4.0-4.3 / 6.3 / 4.7-5.1 / 6.3 / 5.5 GB/s, Q6_K 3.8-4.3 / 5.2 / 5.2 / 6.2 /
/// 5.2 GB/s; 4096 was best or tied for every type.
///
/// 8 KiB on AMD Zen 5 and later, whose L1 prefetches ([`prefetch_nta`]) need the longer
/// lead once memory reads fast: the 2-vCPU EPYC VM (family 1Ah) flips between a ~50 and a
/// ~80 GB/s state of the `membw` probe, and 4 KiB, tuned in the slow one, fell behind in the
/// fast one (`BEST=1 PACKED=1 HUGE=1 kernel_bench 2 stream`, 2026-12-06, alternated, GB/s,
/// probe 79-86): two threads 4 -> 8 KiB, Q4_0 70-72 -> 73-76, Q4_K 62-66 -> 70-73, Q6_K 64-67
/// -> 70-76, Q8_0 73-75 -> 72-76; one thread Q4_K 34-36 -> 37-38, Q6_K 32-35 -> 39; 12 and 16
/// KiB were slower than 8. In the slow state (probe 42-50) the two were level: two threads, as
/// a share of the probe beside each run, Q4_0 0.99-1.04 -> 0.96-1.01, Q4_K 0.99-1.03 ->
/// 0.98-1.01, Q6_K 1.00-1.06 -> 0.99-1.03; one thread Q4_K 34-36 -> 34-40 GB/s, Q6_K 34-36 ->
/// 37-40. Whole models' tg64 in the fast state, 2 alternated rounds (t/s): 1.1B Q4_0
/// 106.8/106.5 -> 115.3/111.0, Q4_K_M 93.4/96.5 -> 106.8/105.8, Q6_K 71.9/74.2 -> 80.0/81.5;
/// tg128 Gemma 3 270M 230.1/239.6 -> 266.4/258.6, Qwen2.5-Coder 0.5B 153.2/161.6 ->
/// 158.0/166.6; in the slow state level (Q4_0 72.5 -> 73.6, Q4_K_M 71.9 -> 68.9, Q6_K 53.4 ->
/// 56.2, Q8_0 40.7 -> 44.7). Those were T0 prefetches; with NTA 8 KiB stayed best (whole 1.1B
/// models' tg, 2 threads, the four alternated, median per-pair ratio to 8 KiB: 6 KiB
/// 0.936-0.982, 12 KiB 0.943-0.964, 16 KiB 0.930-0.947 over Q4_0, Q4_K_M, Q6_K and Q8_0).
#[inline(always)]
fn prefetch_distance() -> usize {
    if is_zen5_or_later() {
        8192
    } else {
        4096
    }
}

/// Prefetches the `bytes` bytes [`prefetch_distance`] past `p` (tiles further down the stream: a
/// group's tiles are contiguous, and so are the groups of a chunk) into a cache when the kernel
/// runs one token (decode). A decode pass unpacks and dots between its loads, and the hardware
/// prefetcher alone then keeps too few reads in flight: asking for the lines ahead overlaps
/// memory with compute. Prefetches never fault, so running past the matrix is harmless; they
/// change no arithmetic, so decode keeps the batch kernels' bits.
///
/// Into L2 (T1), not L1, except on AMD Zen 5 and later ([`prefetch_nta`]): a T0
/// prefetch holds one of the few L1 miss buffers until its line arrives, and those then bound the
/// reads a core has in flight; L2 keeps more misses going, and the loads later find their lines
/// there. On the Zen 4 host (2 threads, `BEST=1 PACKED=1 kernel_bench 2 stream`, alternated, runs
/// whose probe read its usual 32-36 GB/s), T0 here plus T1 8 KiB further on (before) -> T1 here
/// alone: Q4_0 26.9-27.1 -> 30.4-30.6 GB/s, Q4_K 27.3-28.6 -> 28.4-30.6, Q6_K 29.2-32.0 -> 32.4,
/// Q8_0 27.2-29.5 -> 30.2-33.4; one thread Q4_0 18.2-19.6 -> 20.7-22.6, Q6_K 19.0-20.2 ->
/// 23.4-24.5. T1 at 2 KiB was slower for Q6_K (25.6 GB/s), at 6 KiB no better than 4 KiB.
#[inline(always)]
unsafe fn prefetch_ahead(p: *const u8, bytes: usize) {
    let q = p.wrapping_add(prefetch_distance());
    let nta = prefetch_nta();
    let mut off = 0;
    while off < bytes {
        prefetch_stream_line(q.wrapping_add(off), nta);
        off += 64;
    }
}

/// Asks for the line at `p` of a stream read once: NTA where `nta` (looked up once per call by
/// the callers: [`prefetch_nta`] for decode, [`prefetch_share`]'s own test for batches), else
/// into L2.
#[inline(always)]
unsafe fn prefetch_stream_line(p: *const u8, nta: bool) {
    if nta {
        _mm_prefetch::<_MM_HINT_NTA>(p as *const i8);
    } else {
        _mm_prefetch::<_MM_HINT_T1>(p as *const i8);
    }
}

/// Whether [`prefetch_ahead`] asks for L1 without L2 (NTA): on AMD Zen 5 (family 1Ah) and
/// later. Weights a decode pass streams are read once, and lines that pass through L2 leave it
/// for L3 (a victim cache there) when the next ones come in: every weight line then costs an
/// L2-to-L3 transfer besides its read, and the activations, KV rows and norms the steps between
/// the matmuls touch are pushed out of L2. NTA lines skip L2 (the likely reason for the gain).
/// T0 -> NTA, whole models' decode in one process, the two alternated every 16 tokens
/// (2026-12-06, `ALT` in a throwaway build of `ollamars bench`, 20-60 pairs each, median
/// per-pair ratio): 2 threads, VM in its fast memory state (`membw` 70-77 GB/s), 1.1B Q4_0
/// 1.007 / 1.016, Q4_K_M 1.017 / 1.003, Q6_K 1.005 / 1.001, Q8_0 1.007, Gemma 3 270M 1.006 /
/// 1.013, Qwen2.5-Coder 0.5B 1.003 / 1.010; slow state (41-52 GB/s) Q4_0 1.059, Q4_K_M 1.018,
/// Q6_K 1.034, Q8_0 1.021; one thread Q4_0 1.040, Q4_K_M 1.012, Q6_K 0.993; batches of 2 and 4
/// tokens 1.021-1.046; the AVX2 tier (its packed kernels prefetch here too) 1.003-1.055. In the
/// slow state the time between the matmul steps fell too (per token, 1.1B Q4_0: 362-388 ->
/// 309-317 us). [`prefetch_share`] (batches) takes NTA on Zen 4 as well.
///
/// Before that, T0 against T1 there (2026-12-05, 2-vCPU EPYC family 1Ah model 2,
/// `BEST=1 PACKED=1 HUGE=1 kernel_bench 2 stream`, alternated, GB/s against the `membw` probe
/// beside each run): one thread T1 -> T0, Q4_0 28-29 -> 31-32 of 41-44, Q4_K 33-34 -> 35-38 of
/// 40-44, Q6_K 32-34 -> 34 of 41-42; two threads Q4_0 37 -> 39-40 of 47-53, Q4_K 40-41 -> 42-43,
/// Q6_K 41-43 -> 43-45 of 47-53. The whole 1.1B models' tg64, 5 alternated pairs: Q4_0
/// +2.5..+7.7%, Q4_K_M +9..+11% in 3 pairs, Q6_K +0.5..+11%; the pairs where the VM's
/// bandwidth changed state between the two runs went either way. With one group per decode
/// pass there (`kernels::matmul`'s one-group decode), T0 against T1, 3 alternated rounds, one
/// thread: Q4_0 33-39 against 36-39, Q4_K 35 against 32-34, Q6_K 33-35 against 32-33, so T0
/// stayed. Intel and older AMD keep T1 (measured there, above). On an Intel Xeon VM (family 6
/// model CFh, 2026-12-07, same stream bench, two threads) NTA read 19.7-21.1 GB/s where T1 read
/// 26.9-29.2 (BENCHMARKS.md).
#[inline(always)]
fn prefetch_nta() -> bool {
    is_zen5_or_later()
}

/// Whether this CPU is an AMD Zen 5 (family 1Ah) or later, whose decode streams want other
/// settings than the Intel and Zen 4 machines the kernels were first tuned on
/// ([`prefetch_nta`], [`prefetch_distance`], `kernels::matmul`'s one-group decode). Read once
/// from cpuid.
///
/// Zen 4 keeps its own: on a 2-vCPU EPYC of family 19h model 11h (2026-12-06), each Zen 5
/// setting alternated with Zen 4's in one process (a throwaway `ALT` build of `ollamars bench`,
/// whole models' decode, 2 threads, 10-30 pairs, median per-pair ratio to Zen 4's): NTA 1.1B
/// Q4_0 0.77, Q4_K_M 0.84, Q6_K 0.83, Q8_0 0.79, Gemma 3 270M 0.66, Qwen2.5-Coder 0.5B 0.67;
/// 8 KiB ahead 0.99-1.04 (level); one group Q4_0 0.90, Q4_K_M 0.95, Q6_K 0.91, Qwen2.5 0.94,
/// and Q8_0 1.03-1.14 / Gemma 1.05-1.14 (mostly Q8_0) from run to run, where the kernels alone
/// streamed Q8_0 slower with one group (out of cache, 2 threads, 39.2-39.7 -> 35.5-35.6 GB/s).
/// On an Intel Xeon VM (family 6 model CFh, 2026-12-07) the three Zen 5 settings together cost
/// a third of decode's speed (1.1B tg64, 2 threads, alternated: Q4_0 45.8-48.3 -> 30.2-31.3 t/s,
/// Q6_K 31.0-32.0 -> 21.5-22.2).
#[inline(always)]
pub(super) fn is_zen5_or_later() -> bool {
    this_amd_family() >= 0x1a
}

/// This CPU's family if it is an AMD one, else 0. Read once from cpuid.
#[inline(always)]
fn this_amd_family() -> u32 {
    static FAMILY: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *FAMILY.get_or_init(|| {
        let (leaf0, leaf1) = (__cpuid(0), __cpuid(1));
        let mut vendor = [0u8; 12];
        for (i, r) in [leaf0.ebx, leaf0.edx, leaf0.ecx].into_iter().enumerate() {
            vendor[4 * i..4 * i + 4].copy_from_slice(&r.to_le_bytes());
        }
        amd_family(&vendor, leaf1.eax)
    })
}

/// The family that cpuid's vendor string and leaf 1 `eax` (version) name if the vendor is AMD,
/// else 0: the base family plus the extended family when the base is 0Fh (19h is Zen 3 and Zen
/// 4, 1Ah Zen 5).
fn amd_family(vendor: &[u8; 12], version: u32) -> u32 {
    let base = (version >> 8) & 0xf;
    let family = if base == 0xf {
        base + ((version >> 20) & 0xff)
    } else {
        base
    };
    if vendor == b"AuthenticAMD" {
        family
    } else {
        0
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::amd_family;

    #[test]
    fn amd_families_are_told_apart_by_vendor_and_family() {
        // cpuid(1).eax of a Zen 5 EPYC (family 1Ah model 02h), a made-up later AMD family (1Bh),
        // a Zen 4 (19h, 11h), a Zen 2 (17h, 31h) and an Intel Sapphire Rapids (family 6 model
        // 8Fh), also with an AMD-like version.
        assert_eq!(amd_family(b"AuthenticAMD", 0x00b0_0f21), 0x1a);
        assert_eq!(amd_family(b"AuthenticAMD", 0x00c0_0f00), 0x1b);
        assert_eq!(amd_family(b"AuthenticAMD", 0x00a1_0f11), 0x19);
        assert_eq!(amd_family(b"AuthenticAMD", 0x0083_0f10), 0x17);
        assert_eq!(amd_family(b"GenuineIntel", 0x0008_06f8), 0);
        assert_eq!(amd_family(b"GenuineIntel", 0x00b0_0f21), 0);
    }
}

/// [`prefetch_ahead`] for sub-block `j` of a `T` tile at `p`: the tile's lines split evenly
/// over its sub-blocks. A K-quant tile (2304-3360 bytes) is computed on for a long time, and
/// prefetching all its 36-53 lines at its start fills the core's line fill buffers at once, so
/// the prefetches (and the loads behind them) wait; one part per sub-block keeps as many reads
/// in flight all along. Out of cache, one thread (`PACKED=1 THREADS=1 kernel_bench 1 stream`):
/// Q4_K 47.0-48.2 -> 39.9-40.7 ms per 545 MB, Q6_K 69.0-69.8 -> 57.4-59.0 ms per 795 MB.
/// `at` is the tile's offset in its group; see [`next_stream`].
#[inline(always)]
unsafe fn prefetch_part<T: SbType, const R: usize>(p: *const u8, j: usize, at: usize, groups: Groups) {
    let lines = T::TILE.div_ceil(64);
    let (l0, l1) = (j * lines / T::SUBS, (j + 1) * lines / T::SUBS);
    let p = next_stream::<R>(p, at + 64 * l0, groups);
    prefetch_ahead(p.wrapping_add(64 * l0), 64 * (l1 - l0));
}

/// Where a decode kernel's streams lie: packed groups of `bytes` bytes, `stride` bytes apart.
#[derive(Clone, Copy)]
struct Groups {
    bytes: usize,
    stride: usize,
}

/// Where stream `p` (at offset `at` of its group) prefetches from: a decode kernel reads `R`
/// groups side by side and the next call of the chunk goes on with the `R` groups after them,
/// so once [`prefetch_distance`] reaches past a group's end the stream's next lines are `R` groups
/// on, not in the next group (which another stream of this call has been reading all along).
/// Without this, every pair's second group started cold: one thread out of cache
/// (`CPU_TIME=1 PACKED=1 THREADS=1 kernel_bench 1 stream`, 16 runs alternated with the old code
/// on a busy machine), median time ratio Q6_K 0.90, Q4_0 0.95, Q8_0 0.96, Q4_K 1.00.
#[inline(always)]
fn next_stream<const R: usize>(p: *const u8, at: usize, groups: Groups) -> *const u8 {
    if R > 1 && at + prefetch_distance() >= groups.bytes {
        p.wrapping_add((R - 1) * groups.stride)
    } else {
        p
    }
}

/// How many of `left` tokens the decode kernels ([`packed_decode512`], [`sb_decode`]) take in
/// one pass over their groups: up to three (more would not fit the registers beside two
/// groups' values). Four as three and one took 1-11% less time than as two and two (decode's
/// matrices out of cache, `TOKENS=4 kernel_bench 2 stream`): the first pass streams the
/// groups, the second finds them in cache and has less to compute.
#[inline(always)]
fn few(left: usize) -> usize {
    left.min(3)
}

/// Runs a decode kernel over the range `$tokens` a few tokens at a time ([`few`]): `$call` with
/// `$t` the first token of a pass and the const `C` its number of tokens, as in
/// `few_at_a_time!(tokens, t => sb_decode::<T, 1, C>(g, group, 0, t, out, os))`.
macro_rules! few_at_a_time {
    ($tokens:expr, $t:ident => $call:expr) => {{
        let tokens: std::ops::Range<usize> = $tokens;
        let mut $t = tokens.start;
        while $t < tokens.end {
            let c = few(tokens.end - $t);
            match c {
                3 => {
                    const C: usize = 3;
                    $call
                }
                2 => {
                    const C: usize = 2;
                    $call
                }
                _ => {
                    const C: usize = 1;
                    $call
                }
            }
            $t += c;
        }
    }};
}

/// `C` tokens from `t0` (decode: one; a daemon's parallel slots: one per slot) against `R`
/// packed groups (group `r` at `group + r * gstride`, its rows to `out + 16 r`), from the packed
/// tiles, each group's values unpacked once for all `C` tokens. Per group, token and block the
/// float steps are [`packed_tile512`]'s, in its order; the integer sums only go in another
/// order (one token's in two chains, even and odd steps, added at the end): the same integers,
/// so decode keeps the batch kernels' bits. With one chain a block's `vpdpbusd`s wait on each
/// other (~5 cycles each); two chains per group and `R` groups per activation broadcast (or
/// `C` tokens) give the core independent work while it waits for memory.
#[inline(always)]
unsafe fn packed_decode512<T: Pk512, const R: usize, const C: usize>(
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    t0: usize,
    out: *mut f32,
    os: usize,
) {
    const { assert!(T::SUB % 8 == 0, "steps go in pairs") };
    let n_sub = g.side.n_sub;
    let (sd, so, sm) = (g.side.d.as_ptr(), g.side.osum.as_ptr(), g.side.msum.as_ptr());
    let qoff = g.side.qoff.as_ptr();
    let arow: [*const u8; C] = std::array::from_fn(|c| g.xq.as_ptr().add((t0 + c) * g.row_bytes));
    let groups = Groups {
        bytes: g.n_tiles * T::TILE,
        stride: gstride,
    };
    let mut accf = [[_mm512_setzero_ps(); C]; R];
    let mut w = [[_mm512_setzero_si512(); 8]; R];
    for tile in 0..g.n_tiles {
        // Plain loops, not `array::from_fn`: a closure's body would not get this function's
        // target features.
        let tp: [*const u8; R] = std::array::from_fn(|r| group.add(r * gstride + tile * T::TILE));
        let mut st = [T::state(tp[0]); R];
        for r in 0..R {
            let at = tile * T::TILE;
            prefetch_ahead(next_stream::<R>(tp[r], at, groups), T::TILE);
            if r > 0 {
                st[r] = T::state(tp[r]);
            }
        }
        for j in 0..T::SUBS {
            let js = tile * T::SUBS + j;
            for r in 0..R {
                T::steps(tp[r], j, &mut w[r]);
            }
            let mut init = [_mm512_setzero_si512(); C];
            if T::OFF != 0 {
                for (c, init) in init.iter_mut().enumerate() {
                    *init = _mm512_set1_epi32(*so.add((t0 + c) * n_sub + js));
                }
            }
            let qo = *qoff.add(js) as usize;
            let mut acci = [init; R];
            if C == 1 {
                let (mut even, mut odd) = ([init[0]; R], [_mm512_setzero_si512(); R]);
                for k in (0..T::SUB / 4).step_by(2) {
                    let a0 = _mm512_set1_epi32((arow[0].add(qo + 4 * k) as *const i32).read_unaligned());
                    let a1 = _mm512_set1_epi32((arow[0].add(qo + 4 * k + 4) as *const i32).read_unaligned());
                    for r in 0..R {
                        even[r] = _mm512_dpbusd_epi32(even[r], w[r][k], a0);
                        odd[r] = _mm512_dpbusd_epi32(odd[r], w[r][k + 1], a1);
                    }
                }
                for r in 0..R {
                    acci[r][0] = _mm512_add_epi32(even[r], odd[r]);
                }
            } else {
                for k in 0..T::SUB / 4 {
                    for c in 0..C {
                        let a = _mm512_set1_epi32((arow[c].add(qo + 4 * k) as *const i32).read_unaligned());
                        for r in 0..R {
                            acci[r][c] = _mm512_dpbusd_epi32(acci[r][c], w[r][k], a);
                        }
                    }
                }
            }
            for c in 0..C {
                let d = _mm512_set1_ps(*sd.add((t0 + c) * n_sub + js));
                for r in 0..R {
                    let s = T::scale(&st[r], j);
                    accf[r][c] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[r][c]), _mm512_mul_ps(s, d), accf[r][c]);
                    if T::MIN {
                        let m = _mm512_set1_ps(*sm.add((t0 + c) * n_sub + js));
                        accf[r][c] = _mm512_fmadd_ps(T::min(tp[r]), m, accf[r][c]);
                    }
                }
            }
        }
    }
    for (r, acc) in accf.iter().enumerate() {
        for (c, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.add((t0 + c) * os + 16 * r), *acc);
        }
    }
}

/// `R` groups (group `r` at `group + r * gstride`, its rows to `out + 16 r`) against `C` tokens
/// from `t0`, each activation broadcast feeding every group's `vpdpbusd`. A row and token get
/// the same integer and float steps in the same order whatever `R` and `C` are, and the decode
/// kernel ([`packed_decode512`]) gives them the same bits.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn packed_tile512<T: Pk512, const R: usize, const C: usize>(
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    t0: usize,
    out: *mut f32,
    os: usize,
    first: bool,
) {
    let groups = Groups {
        bytes: g.n_tiles * T::TILE,
        stride: gstride,
    };
    let n_sub = g.side.n_sub;
    let (sd, so, sm) = (g.side.d.as_ptr(), g.side.osum.as_ptr(), g.side.msum.as_ptr());
    let qoff = g.side.qoff.as_ptr();
    let mut accf = [[_mm512_setzero_ps(); C]; R];
    let arow: [*const u8; C] = std::array::from_fn(|c| g.xq.as_ptr().add((t0 + c) * g.row_bytes));
    let mut w = [[_mm512_setzero_si512(); 8]; R];
    for tile in 0..g.n_tiles {
        // Plain loops, not `array::from_fn` with intrinsics: a closure's body would not get
        // this function's target features.
        let tp: [*const u8; R] = std::array::from_fn(|r| group.add(r * gstride + tile * T::TILE));
        let mut st = [T::state(tp[0]); R];
        for r in 1..R {
            st[r] = T::state(tp[r]);
        }
        if first {
            for p in tp {
                prefetch_ahead(next_stream::<R>(p, tile * T::TILE, groups), T::TILE);
            }
        }
        for j in 0..T::SUBS {
            let js = tile * T::SUBS + j;
            for r in 0..R {
                T::steps(tp[r], j, &mut w[r]);
            }
            let mut init = [_mm512_setzero_si512(); C];
            if T::OFF != 0 {
                for (c, init) in init.iter_mut().enumerate() {
                    *init = _mm512_set1_epi32(*so.add((t0 + c) * n_sub + js));
                }
            }
            let mut acci = [init; R];
            let qo = *qoff.add(js) as usize;
            for k in 0..T::SUB / 4 {
                for c in 0..C {
                    let a = _mm512_set1_epi32((arow[c].add(qo + 4 * k) as *const i32).read_unaligned());
                    for r in 0..R {
                        acci[r][c] = _mm512_dpbusd_epi32(acci[r][c], w[r][k], a);
                    }
                }
            }
            for r in 0..R {
                let s = T::scale(&st[r], j);
                let m = T::min(tp[r]);
                for c in 0..C {
                    let d = _mm512_set1_ps(*sd.add((t0 + c) * n_sub + js));
                    accf[r][c] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[r][c]), _mm512_mul_ps(s, d), accf[r][c]);
                    if T::MIN {
                        let x = _mm512_set1_ps(*sm.add((t0 + c) * n_sub + js));
                        accf[r][c] = _mm512_fmadd_ps(m, x, accf[r][c]);
                    }
                }
            }
        }
    }
    for (r, accf) in accf.iter().enumerate() {
        for (c, acc) in accf.iter().enumerate() {
            _mm512_storeu_ps(out.add((t0 + c) * os + 16 * r), *acc);
        }
    }
}

/// `R` groups (group `r` at `group + r * gstride`) against a batch: tiles of `N` tokens
/// ([`packed_tile512`]), the last few tokens through the decode kernel. One group takes tiles of
/// 8; two groups (Q4_0, Q5_0: see [`packed_pair_avx512`]) tiles of 4, whose 16 step
/// registers, 8 sums and 8 accumulators still fit.
///
/// The first tile of tokens streams the groups from memory and asks for the lines ahead as
/// decode does ([`prefetch_ahead`]); the later ones find them in cache. Without it a short
/// batch (a daemon's parallel slots, a short prompt) waited for memory between its bursts of
/// compute: 22 TinyLlama-1.1B layers out of cache (`BEST=1 PACKED=1 HUGE=1 kernel_bench 2
/// stream`, two threads, alternated, ms per step), 8 tokens Q4_0 20.4-20.6 -> 15.1-15.5, Q5_0
/// 24.1-24.6 -> 17.3-18.5, Q8_0 31.0-31.4 -> 18.3-23.8; 16 tokens Q4_0 30.1-31.2 -> 24.4-24.5,
/// Q8_0 43.5-43.6 -> 30.0-31.0; 64 tokens Q4_0 88.7-89.8 -> 81.3-82.2, Q8_0 115.9-119.7 ->
/// 99.5-101.6.
#[inline(always)]
unsafe fn packed_body512<T: Pk512, const R: usize, const N: usize>(
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    let mut t = tokens.start;
    while t + N <= tokens.end {
        packed_tile512::<T, R, N>(g, group, gstride, t, out, os, t == tokens.start);
        t += N;
    }
    few_at_a_time!(t..tokens.end, t => packed_decode512::<T, R, C>(g, group, gstride, t, out, os));
}

/// The 16 rows of one packed group against tokens `tokens`: `out[t * os + r]`, `r < 16`
/// (`_gstride` only gives it [`packed_pair_avx512`]'s signature).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn packed_avx512(
    ty: GgmlType,
    g: &PkArgs,
    group: *const u8,
    _gstride: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    match ty {
        GgmlType::Q8_0 => packed_body512::<PkQ8_0, 1, 8>(g, group, 0, tokens, out, os),
        GgmlType::Q4_0 => packed_body512::<PkQ4_0, 1, 8>(g, group, 0, tokens, out, os),
        GgmlType::Q4_1 => packed_body512::<PkQ4_1, 1, 8>(g, group, 0, tokens, out, os),
        GgmlType::Q5_0 => packed_body512::<PkQ5_0, 1, 8>(g, group, 0, tokens, out, os),
        GgmlType::Q5_1 => packed_body512::<PkQ5_1, 1, 8>(g, group, 0, tokens, out, os),
        GgmlType::IQ4_NL => packed_body512::<PkIq4Nl, 1, 8>(g, group, 0, tokens, out, os),
        GgmlType::Q2_K => sb_body::<PkQ2K>(g, group, tokens, out, os),
        GgmlType::Q3_K => sb_body::<PkQ3K>(g, group, tokens, out, os),
        GgmlType::Q4_K => sb_body::<PkQ4K>(g, group, tokens, out, os),
        GgmlType::Q5_K => sb_body::<PkQ5K>(g, group, tokens, out, os),
        GgmlType::Q6_K => sb_body::<PkQ6K>(g, group, tokens, out, os),
        GgmlType::IQ4_XS => sb_body::<PkIq4Xs>(g, group, tokens, out, os),
        _ => unreachable!("no packed kernel for {ty}"),
    }
}

// K-quants (Q4_K, Q6_K) on the super-block kernel: with 16 rows per vector, the per-sub-block
// work (scale conversion, the float multiply-adds, unpacking the values) costs as much as the
// dot products themselves unless it is shared by many tokens. So (Q6_K) each sub-block's integer sum is
// scaled by the rows' f32 scales into a super-block sum, which the token's Q8_K scale (one per
// super-block) multiplies once; offset sums start as a precomputed `-off · Σa` (a broadcast
// load); and for a batch the group's values and f32 scales/mins are unpacked once into a per-thread buffer
// that every 8-token tile then reads, instead of being unpacked again for every eight tokens.
// Decode reads the packed tiles directly; both paths do the same integer and float steps in the
// same order, so a token gets the same bits alone or in a batch.

/// A K-quant packed type as the super-block kernel sees it.
trait SbType {
    /// Packed tile bytes.
    const TILE: usize;
    /// Sub-blocks per super-block and 4-element steps per sub-block.
    const SUBS: usize;
    const STEPS: usize;
    /// Whether the stored values are offset (the sum starts at `osum`).
    const OFF: bool;
    /// Whether rows have a per-sub-block minimum.
    const MIN: bool;
    /// Whether [`SbType::scale`] leaves out a per-row super-block scale ([`SbType::row_d`]):
    /// then the sub-block sums times the small integer scales (exact in f32, like llama.cpp's
    /// integer `Σ sc·sum`) are multiplied by `d_row · d_token` once per super-block.
    const ROW_D: bool;
    /// Whether a super-block's sum is the exact integer `Σ sc · Σ q · a` ([`SbType::int_scale`]
    /// times each sub-block's integer sum, in i32), converted once and scaled by the row's
    /// super-block scale ([`SbType::row_d`], so `ROW_D` too), then the token's: the AMX tier's
    /// Q6_K, whose tiles sum whole super-blocks ([`PkQ6KInt`]).
    const INT_SUM: bool = false;
    /// Tokens from which a batch unpacks this type's groups ([`sb_body`], [`sb_body_pair`]);
    /// fewer go through the decode kernel a few tokens per pass over the packed tiles
    /// ([`sb_decode`], [`few`]). See [`unpack_min_tokens`] for the measurements.
    const UNPACK_MIN_TOKENS: usize;
    type St: Copy;
    unsafe fn state(t: *const u8) -> Self::St;
    unsafe fn scale(st: &Self::St, t: *const u8, j: usize) -> __m512;
    /// The rows' f32 minimums of sub-block `j` (with `MIN`).
    #[inline(always)]
    unsafe fn min(_st: &Self::St, _t: *const u8, _j: usize) -> __m512 {
        _mm512_setzero_ps()
    }
    /// The rows' super-block scale left out of [`SbType::scale`] (with `ROW_D`).
    #[inline(always)]
    unsafe fn row_d(_st: &Self::St) -> __m512 {
        _mm512_setzero_ps()
    }
    /// The rows' integer scales of sub-block `j` (with `INT_SUM`).
    #[inline(always)]
    unsafe fn int_scale(_t: *const u8, _j: usize) -> __m512i {
        _mm512_setzero_si512()
    }
    /// Sub-block `j`'s values as `STEPS` 64-byte steps of unsigned bytes, in `w[..STEPS]`.
    unsafe fn steps(t: *const u8, j: usize, w: &mut [__m512i; 8]);
    /// The integer dot products of sub-block `j` with one token's quants `a`, from `acc`,
    /// straight from the packed tile (decode), as two chains (even and odd steps) added at the
    /// end: the same integer in half the dependent `vpdpbusd` latency.
    #[inline(always)]
    unsafe fn dot_packed(t: *const u8, j: usize, a: *const u8, acc: __m512i) -> __m512i {
        const { assert!(Self::STEPS % 2 == 0, "steps go in pairs") };
        let mut w = [_mm512_setzero_si512(); 8];
        Self::steps(t, j, &mut w);
        let (mut even, mut odd) = (acc, _mm512_setzero_si512());
        for k in (0..Self::STEPS).step_by(2) {
            let a0 = _mm512_set1_epi32((a.add(4 * k) as *const i32).read_unaligned());
            let a1 = _mm512_set1_epi32((a.add(4 * k + 4) as *const i32).read_unaligned());
            even = _mm512_dpbusd_epi32(even, w[k], a0);
            odd = _mm512_dpbusd_epi32(odd, w[k + 1], a1);
        }
        _mm512_add_epi32(even, odd)
    }
    /// Bytes of one unpacked tile: per sub-block the rows' f32 scales (i32 with INT_SUM), then
    /// (with MIN) their f32 mins, then (with ROW_D) the rows' f32 super-block scale, then the
    /// values as `STEPS` steps per sub-block.
    const UNPACKED: usize = Self::VALS + Self::SUBS * Self::STEPS * 64;
    const ROW_D_AT: usize = Self::SUBS * 64 * (1 + Self::MIN as usize);
    const VALS: usize = Self::ROW_D_AT + 64 * Self::ROW_D as usize;
}

impl SbType for PkQ6K {
    const TILE: usize = 3360;
    const SUBS: usize = 16;
    const STEPS: usize = 4;
    const OFF: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = false;
    const UNPACK_MIN_TOKENS: usize = 12;
    type St = __m512;
    #[inline(always)]
    unsafe fn state(t: *const u8) -> __m512 {
        d16(t)
    }
    #[inline(always)]
    unsafe fn scale(d: &__m512, t: *const u8, j: usize) -> __m512 {
        _mm512_mul_ps(*d, _mm512_cvtepi32_ps(PkQ6KInt::int_scale(t, j)))
    }
    #[inline(always)]
    unsafe fn steps(t: *const u8, j: usize, w: &mut [__m512i; 8]) {
        let (a0, a1) = nib512(t.add(288 + 64 * (2 * j)));
        let (a2, a3) = nib512(t.add(288 + 64 * (2 * j + 1)));
        let qh = ld512(t.add(2336 + 64 * j));
        let m = _mm512_set1_epi8(0x30);
        w[0] = _mm512_or_si512(a0, _mm512_and_si512(_mm512_slli_epi16(qh, 4), m));
        w[1] = _mm512_or_si512(a1, _mm512_and_si512(_mm512_slli_epi16(qh, 2), m));
        w[2] = _mm512_or_si512(a2, _mm512_and_si512(qh, m));
        w[3] = _mm512_or_si512(a3, _mm512_and_si512(_mm512_srli_epi16(qh, 2), m));
    }
}

/// Q6_K as the AMX tier sums it ([`SbType::INT_SUM`]): the tokens its tiles do not take
/// (decode, short batches, a batch's last tokens) get the tiles' bits.
pub(super) struct PkQ6KInt;

impl SbType for PkQ6KInt {
    const TILE: usize = PkQ6K::TILE;
    const SUBS: usize = PkQ6K::SUBS;
    const STEPS: usize = PkQ6K::STEPS;
    const OFF: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = true;
    const INT_SUM: bool = true;
    // The AMX tier's, untimed at other counts (no AMX here).
    const UNPACK_MIN_TOKENS: usize = 8;
    type St = __m512;
    #[inline(always)]
    unsafe fn state(t: *const u8) -> __m512 {
        d16(t)
    }
    #[inline(always)]
    unsafe fn scale(_d: &__m512, t: *const u8, j: usize) -> __m512 {
        _mm512_cvtepi32_ps(Self::int_scale(t, j))
    }
    #[inline(always)]
    unsafe fn row_d(d: &__m512) -> __m512 {
        *d
    }
    #[inline(always)]
    unsafe fn int_scale(t: *const u8, j: usize) -> __m512i {
        _mm512_cvtepi8_epi32(ld128(t.add(32 + 16 * j)))
    }
    #[inline(always)]
    unsafe fn steps(t: *const u8, j: usize, w: &mut [__m512i; 8]) {
        PkQ6K::steps(t, j, w);
    }
}

/// The 8 six-bit scales and 8 mins of Q4_K/Q5_K rows (one row per byte lane) from their 12 scale
/// bytes, byte `i` of the rows in `q[i]`: `scale_min_k4` for every lane at once.
#[inline(always)]
unsafe fn k4_scale_bytes(q: [__m128i; 12]) -> ([__m128i; 8], [__m128i; 8]) {
    let (m63, m15, m3) = (_mm_set1_epi8(63), _mm_set1_epi8(15), _mm_set1_epi8(3));
    // A nested fn, not a closure: it must get the kernel's target features inlined.
    #[inline(always)]
    unsafe fn top2(x: __m128i, m3: __m128i) -> __m128i {
        _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(x, 6), m3), 4)
    }
    let mut sc = [_mm_setzero_si128(); 8];
    let mut m = [_mm_setzero_si128(); 8];
    for j in 0..4 {
        sc[j] = _mm_and_si128(q[j], m63);
        m[j] = _mm_and_si128(q[j + 4], m63);
    }
    for j in 4..8 {
        sc[j] = _mm_or_si128(_mm_and_si128(q[j + 4], m15), top2(q[j - 4], m3));
        m[j] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q[j + 4], 4), m15), top2(q[j], m3));
    }
    (sc, m)
}

/// The 8 signed sub-block scales of IQ4_XS rows (one row per byte lane) from their 6 scale bytes
/// (`scales_h`, `scales_l`), byte `i` of the rows in `q[i]`.
#[inline(always)]
unsafe fn iq4xs_scale_bytes(q: [__m128i; 6]) -> [__m128i; 8] {
    let (m15, m48, m32) = (_mm_set1_epi8(15), _mm_set1_epi8(48), _mm_set1_epi8(32));
    let mut sc = [_mm_setzero_si128(); 8];
    for (ib, sc) in sc.iter_mut().enumerate() {
        // Low 4 bits: scales_l byte ib/2, nibble ib%2; top 2: scales_h bits 2ib.. (byte ib/4).
        let l = q[2 + ib / 2];
        let low = if ib % 2 == 0 { l } else { _mm_srli_epi16::<4>(l) };
        let h = q[ib / 4];
        let top = match ib % 4 {
            0 => _mm_slli_epi16::<4>(h),
            1 => _mm_slli_epi16::<2>(h),
            2 => h,
            _ => _mm_srli_epi16::<2>(h),
        };
        let v = _mm_or_si128(_mm_and_si128(low, m15), _mm_and_si128(top, m48));
        *sc = _mm_sub_epi8(v, m32);
    }
    sc
}

/// The 16 signed sub-block scales of Q3_K rows (one row per byte lane) from their 12 scale bytes,
/// byte `i` of the rows in `q[i]`: six bits each, unpacked as ggml does, less 32.
#[inline(always)]
unsafe fn q3k_scale_bytes(q: [__m128i; 12]) -> [__m128i; 16] {
    let (m15, m3, m32) = (_mm_set1_epi8(15), _mm_set1_epi8(3), _mm_set1_epi8(32));
    let mut sc = [_mm_setzero_si128(); 16];
    for j in 0..4 {
        let top = [
            q[8 + j],
            _mm_srli_epi16::<2>(q[8 + j]),
            _mm_srli_epi16::<4>(q[8 + j]),
            _mm_srli_epi16::<6>(q[8 + j]),
        ];
        let low = [
            q[j],
            q[j + 4],
            _mm_srli_epi16::<4>(q[j]),
            _mm_srli_epi16::<4>(q[j + 4]),
        ];
        for (g, (low, top)) in low.iter().zip(top).enumerate() {
            let v = _mm_or_si128(
                _mm_and_si128(*low, m15),
                _mm_slli_epi16::<4>(_mm_and_si128(top, m3)),
            );
            sc[4 * g + j] = _mm_sub_epi8(v, m32);
        }
    }
    sc
}

/// Q4_K per-tile state: `d`, `dmin` and the 8 scales / 8 mins of the 16 rows (bytes).
#[derive(Clone, Copy)]
pub(super) struct Q4KSt {
    d: __m512,
    dmin: __m512,
    sc: [__m128i; 8],
    m: [__m128i; 8],
}

impl SbType for PkQ4K {
    const TILE: usize = 2304;
    const SUBS: usize = 8;
    const STEPS: usize = 8;
    const OFF: bool = false;
    const MIN: bool = true;
    const ROW_D: bool = true;
    const UNPACK_MIN_TOKENS: usize = 18;
    type St = Q4KSt;
    #[inline(always)]
    unsafe fn state(t: *const u8) -> Q4KSt {
        let (sc, m) = k4_scale_bytes(ld_rows::<12, 16>(t.add(64)));
        Q4KSt {
            d: d16(t),
            dmin: d16(t.add(32)),
            sc,
            m,
        }
    }
    #[inline(always)]
    unsafe fn scale(st: &Q4KSt, _: *const u8, j: usize) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(st.sc[j]))
    }
    #[inline(always)]
    unsafe fn row_d(st: &Q4KSt) -> __m512 {
        st.d
    }
    #[inline(always)]
    unsafe fn min(st: &Q4KSt, _: *const u8, j: usize) -> __m512 {
        _mm512_mul_ps(st.dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(st.m[j])))
    }
    #[inline(always)]
    unsafe fn steps(t: *const u8, j: usize, w: &mut [__m512i; 8]) {
        for c in 0..4 {
            (w[2 * c], w[2 * c + 1]) = nib512(t.add(256 + 64 * (4 * j + c)));
        }
    }
    /// The high nibbles are dotted as `16·h` (masked, not shifted) into sums of their own,
    /// which halves the shifts; low and high sums each go in two chains (even and odd nibble
    /// chunks), four independent chains of two. The sum is the same integer.
    #[inline(always)]
    unsafe fn dot_packed(t: *const u8, j: usize, a: *const u8, acc: __m512i) -> __m512i {
        let (m_lo, m_hi) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0xf0u8 as i8));
        let mut lo = [acc, _mm512_setzero_si512()];
        let mut hi = [_mm512_setzero_si512(); 2];
        for c in 0..4 {
            let v = ld512(t.add(256 + 64 * (4 * j + c)));
            let a_lo = _mm512_set1_epi32((a.add(8 * c) as *const i32).read_unaligned());
            let a_hi = _mm512_set1_epi32((a.add(8 * c + 4) as *const i32).read_unaligned());
            lo[c % 2] = _mm512_dpbusd_epi32(lo[c % 2], _mm512_and_si512(v, m_lo), a_lo);
            hi[c % 2] = _mm512_dpbusd_epi32(hi[c % 2], _mm512_and_si512(v, m_hi), a_hi);
        }
        let hi = _mm512_add_epi32(hi[0], hi[1]);
        _mm512_add_epi32(_mm512_add_epi32(lo[0], lo[1]), _mm512_srai_epi32(hi, 4))
    }
}

/// Per-tile state of the types whose sub-block scales are small signed integers times the row's
/// `d` (Q3_K, IQ4_XS): `d` and, per sub-block, the 16 rows' scales as signed bytes.
#[derive(Clone, Copy)]
pub(super) struct SignedScales<const N: usize> {
    d: __m512,
    sc: [__m128i; N],
}

impl<const N: usize> SignedScales<N> {
    /// The rows' f32 scales of sub-block `j`.
    #[inline(always)]
    unsafe fn scale(&self, j: usize) -> __m512 {
        _mm512_mul_ps(self.d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(self.sc[j])))
    }
}

/// IQ4_XS (see `packed`): 4-bit indices into the IQ4_NL levels, looked up as the levels plus
/// 128 (unsigned bytes for `vpdpbusd`; sums start at `-128 · Σa`), 8 six-bit scales per row
/// less 32.
impl SbType for PkIq4Xs {
    const TILE: usize = 2176;
    const SUBS: usize = 8;
    const STEPS: usize = 8;
    const OFF: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = false;
    const UNPACK_MIN_TOKENS: usize = 18;
    type St = SignedScales<8>;
    #[inline(always)]
    unsafe fn state(t: *const u8) -> SignedScales<8> {
        let sc = iq4xs_scale_bytes(ld_rows::<6, 16>(t.add(32)));
        SignedScales { d: d16(t), sc }
    }
    #[inline(always)]
    unsafe fn scale(st: &SignedScales<8>, _: *const u8, j: usize) -> __m512 {
        st.scale(j)
    }
    #[inline(always)]
    unsafe fn steps(t: *const u8, j: usize, w: &mut [__m512i; 8]) {
        iq4_steps512(t.add(128 + 256 * j), w);
    }
}

/// Q3_K (see `packed`): 3-bit codes (value + 4) from a 2-bit and a 1-bit plane, 16 six-bit
/// scales per row unpacked from their 12 bytes as ggml does, less 32.
impl SbType for PkQ3K {
    const TILE: usize = 1760;
    const SUBS: usize = 16;
    const STEPS: usize = 4;
    const OFF: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = false;
    const UNPACK_MIN_TOKENS: usize = 12;
    type St = SignedScales<16>;
    #[inline(always)]
    unsafe fn state(t: *const u8) -> SignedScales<16> {
        let sc = q3k_scale_bytes(ld_rows::<12, 16>(t.add(32)));
        SignedScales { d: d16(t), sc }
    }
    #[inline(always)]
    unsafe fn scale(st: &SignedScales<16>, _: *const u8, j: usize) -> __m512 {
        st.scale(j)
    }
    #[inline(always)]
    unsafe fn steps(t: *const u8, j: usize, w: &mut [__m512i; 8]) {
        let lo = ld512(t.add(224 + 64 * j));
        let h = ld512(t.add(1248 + 64 * (j / 2)));
        let (m3, m4) = (_mm512_set1_epi8(3), _mm512_set1_epi8(4));
        // Step s's 3rd bit is bit 4(j % 2) + s of its byte: moved to bit 2 (16-bit shifts, the
        // mask keeps the bit that stayed within its byte).
        let top = if j.is_multiple_of(2) {
            [
                _mm512_slli_epi16(h, 2),
                _mm512_slli_epi16(h, 1),
                h,
                _mm512_srli_epi16(h, 1),
            ]
        } else {
            [
                _mm512_srli_epi16(h, 2),
                _mm512_srli_epi16(h, 3),
                _mm512_srli_epi16(h, 4),
                _mm512_srli_epi16(h, 5),
            ]
        };
        let low = [
            lo,
            _mm512_srli_epi16(lo, 2),
            _mm512_srli_epi16(lo, 4),
            _mm512_srli_epi16(lo, 6),
        ];
        for s in 0..4 {
            w[s] = _mm512_or_si512(_mm512_and_si512(low[s], m3), _mm512_and_si512(top[s], m4));
        }
    }
}

/// Q2_K (see `packed`): 2-bit values, per sub-block of 16 a 4-bit scale and a 4-bit min (one
/// byte per row, four sub-blocks' bytes of a row in one 32-bit lane), both times the row's `d` /
/// `dmin`. With 16 sub-blocks per 84 bytes of a row, the per-sub-block work bounds decode (one
/// thread, matrix in L2: 11-14 GB/s against Q4_K's 24), so the scale and min come out of their
/// 32-bit lanes with a shift and a mask, not a byte widening.
impl SbType for PkQ2K {
    const TILE: usize = 1344;
    const SUBS: usize = 16;
    const STEPS: usize = 4;
    const OFF: bool = false;
    const MIN: bool = true;
    const ROW_D: bool = true;
    const UNPACK_MIN_TOKENS: usize = 8;
    /// `d` and `dmin`; the scale bytes are read per sub-block.
    type St = (__m512, __m512);
    #[inline(always)]
    unsafe fn state(t: *const u8) -> (__m512, __m512) {
        (d16(t), d16(t.add(32)))
    }
    #[inline(always)]
    unsafe fn scale(_: &(__m512, __m512), t: *const u8, j: usize) -> __m512 {
        _mm512_cvtepi32_ps(q2k_nibble(t, j, 0))
    }
    #[inline(always)]
    unsafe fn row_d(st: &(__m512, __m512)) -> __m512 {
        st.0
    }
    #[inline(always)]
    unsafe fn min(st: &(__m512, __m512), t: *const u8, j: usize) -> __m512 {
        _mm512_mul_ps(st.1, _mm512_cvtepi32_ps(q2k_nibble(t, j, 4)))
    }
    #[inline(always)]
    unsafe fn steps(t: *const u8, j: usize, w: &mut [__m512i; 8]) {
        let v = ld512(t.add(320 + 64 * j));
        let m3 = _mm512_set1_epi8(3);
        w[0] = _mm512_and_si512(v, m3);
        w[1] = _mm512_and_si512(_mm512_srli_epi16(v, 2), m3);
        w[2] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m3);
        w[3] = _mm512_and_si512(_mm512_srli_epi16(v, 6), m3);
    }
}

/// The 16 rows' nibble at bit `at` (0: scale, 4: min) of Q2_K tile `t`'s scale byte `j`.
#[inline(always)]
unsafe fn q2k_nibble(t: *const u8, j: usize, at: i32) -> __m512i {
    let v = ld512(t.add(64 + 64 * (j / 4)));
    let shift = _mm_cvtsi32_si128(8 * (j % 4) as i32 + at);
    _mm512_and_si512(_mm512_srl_epi32(v, shift), _mm512_set1_epi32(15))
}

/// Q5_K: Q4_K's tile with the 5th bits after the nibbles (see `packed`), added to each step's
/// values as `16·h`.
impl SbType for PkQ5K {
    const TILE: usize = 2816;
    const SUBS: usize = 8;
    const STEPS: usize = 8;
    const OFF: bool = false;
    const MIN: bool = true;
    const ROW_D: bool = true;
    const UNPACK_MIN_TOKENS: usize = 18;
    type St = Q4KSt;
    #[inline(always)]
    unsafe fn state(t: *const u8) -> Q4KSt {
        PkQ4K::state(t)
    }
    #[inline(always)]
    unsafe fn scale(st: &Q4KSt, t: *const u8, j: usize) -> __m512 {
        PkQ4K::scale(st, t, j)
    }
    #[inline(always)]
    unsafe fn row_d(st: &Q4KSt) -> __m512 {
        PkQ4K::row_d(st)
    }
    #[inline(always)]
    unsafe fn min(st: &Q4KSt, t: *const u8, j: usize) -> __m512 {
        PkQ4K::min(st, t, j)
    }
    #[inline(always)]
    unsafe fn steps(t: *const u8, j: usize, w: &mut [__m512i; 8]) {
        PkQ4K::steps(t, j, w);
        // Bit s of each byte is step s's 5th bit: move it to bit 4 (16-bit shifts, then the
        // mask keeps only bits that stayed within their byte).
        let h = ld512(t.add(2304 + 64 * j));
        let m = _mm512_set1_epi8(0x10);
        w[0] = _mm512_or_si512(w[0], _mm512_and_si512(_mm512_slli_epi16(h, 4), m));
        w[1] = _mm512_or_si512(w[1], _mm512_and_si512(_mm512_slli_epi16(h, 3), m));
        w[2] = _mm512_or_si512(w[2], _mm512_and_si512(_mm512_slli_epi16(h, 2), m));
        w[3] = _mm512_or_si512(w[3], _mm512_and_si512(_mm512_slli_epi16(h, 1), m));
        w[4] = _mm512_or_si512(w[4], _mm512_and_si512(h, m));
        w[5] = _mm512_or_si512(w[5], _mm512_and_si512(_mm512_srli_epi16(h, 1), m));
        w[6] = _mm512_or_si512(w[6], _mm512_and_si512(_mm512_srli_epi16(h, 2), m));
        w[7] = _mm512_or_si512(w[7], _mm512_and_si512(_mm512_srli_epi16(h, 3), m));
    }
}

/// Unpacks a group's `n_tiles` tiles into `buf` (`n_tiles * T::UNPACKED` bytes).
#[inline(always)]
unsafe fn sb_unpack<T: SbType>(group: *const u8, n_tiles: usize, buf: *mut u8) {
    let mut w = [_mm512_setzero_si512(); 8];
    for tile in 0..n_tiles {
        let tp = group.add(tile * T::TILE);
        let bp = buf.add(tile * T::UNPACKED);
        let st = T::state(tp);
        if T::ROW_D {
            _mm512_storeu_ps(bp.add(T::ROW_D_AT) as *mut f32, T::row_d(&st));
        }
        for j in 0..T::SUBS {
            if T::INT_SUM {
                _mm512_storeu_si512(bp.add(64 * j) as *mut _, T::int_scale(tp, j));
            } else {
                _mm512_storeu_ps(bp.add(64 * j) as *mut f32, T::scale(&st, tp, j));
            }
            if T::MIN {
                _mm512_storeu_ps(bp.add(64 * (T::SUBS + j)) as *mut f32, T::min(&st, tp, j));
            }
            T::steps(tp, j, &mut w);
            for (k, w) in w.iter().enumerate().take(T::STEPS) {
                _mm512_storeu_si512(bp.add(T::VALS + 64 * (T::STEPS * j + k)) as *mut _, *w);
            }
        }
    }
}

/// `C` tokens from `t0` against `R` packed groups (group `r` at `src + r * gstride`, its rows to
/// `out + 16 r`), from the packed tiles, each sub-block's values unpacked once for all `C`
/// tokens: decode and batches too short to unpack a group for. Per token and row the integer
/// and float steps are [`sb_tile_rows`]'s, in its order (`dot_packed` only splits one token's
/// integer sums), so both paths give the same bits; `R` groups share each activation load and
/// give the core independent chains.
#[inline(always)]
unsafe fn sb_decode<T: SbType, const R: usize, const C: usize>(
    g: &PkArgs,
    src: *const u8,
    gstride: usize,
    t0: usize,
    out: *mut f32,
    os: usize,
) {
    let n_sub = g.side.n_sub;
    let (sd, so, sm) = (g.side.d.as_ptr(), g.side.osum.as_ptr(), g.side.msum.as_ptr());
    let qoff = g.side.qoff.as_ptr();
    let arow: [*const u8; C] = std::array::from_fn(|c| g.xq.as_ptr().add((t0 + c) * g.row_bytes));
    let groups = Groups {
        bytes: g.n_tiles * T::TILE,
        stride: gstride,
    };
    let mut accf = [[_mm512_setzero_ps(); C]; R];
    for tile in 0..g.n_tiles {
        // Plain loops, not `array::from_fn`: a closure's body would not get this function's
        // target features.
        let tp: [*const u8; R] = std::array::from_fn(|r| src.add(r * gstride + tile * T::TILE));
        let mut st = [T::state(tp[0]); R];
        for r in 1..R {
            st[r] = T::state(tp[r]);
        }
        let mut accs = [[_mm512_setzero_ps(); C]; R];
        let mut isum = [[_mm512_setzero_si512(); C]; R];
        for j in 0..T::SUBS {
            for p in tp {
                prefetch_part::<T, R>(p, j, tile * T::TILE, groups);
            }
            let js = tile * T::SUBS + j;
            let qo = *qoff.add(js) as usize;
            let mut init = [_mm512_setzero_si512(); C];
            if T::OFF {
                for (c, init) in init.iter_mut().enumerate() {
                    *init = _mm512_set1_epi32(*so.add((t0 + c) * n_sub + js));
                }
            }
            let mut acci = [init; R];
            if C == 1 {
                for r in 0..R {
                    acci[r][0] = T::dot_packed(tp[r], j, arow[0].add(qo), init[0]);
                }
            } else {
                let mut w = [[_mm512_setzero_si512(); 8]; R];
                for r in 0..R {
                    T::steps(tp[r], j, &mut w[r]);
                }
                for k in 0..T::STEPS {
                    for c in 0..C {
                        let a = _mm512_set1_epi32((arow[c].add(qo + 4 * k) as *const i32).read_unaligned());
                        for r in 0..R {
                            acci[r][c] = _mm512_dpbusd_epi32(acci[r][c], w[r][k], a);
                        }
                    }
                }
            }
            if T::INT_SUM {
                for r in 0..R {
                    let sc = T::int_scale(tp[r], j);
                    for c in 0..C {
                        isum[r][c] = _mm512_add_epi32(isum[r][c], _mm512_mullo_epi32(acci[r][c], sc));
                    }
                }
                continue;
            }
            for r in 0..R {
                let (s, m) = (T::scale(&st[r], tp[r], j), T::min(&st[r], tp[r], j));
                for c in 0..C {
                    accs[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[r][c]), s, accs[r][c]);
                    if T::MIN {
                        let x = _mm512_set1_ps(*sm.add((t0 + c) * n_sub + js));
                        accf[r][c] = _mm512_fmadd_ps(m, x, accf[r][c]);
                    }
                }
            }
        }
        for c in 0..C {
            // Q8_K has one scale per super-block: the same for all its sub-blocks.
            let d = _mm512_set1_ps(*sd.add((t0 + c) * n_sub + tile * T::SUBS));
            for r in 0..R {
                if T::INT_SUM {
                    let x = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[r][c]), T::row_d(&st[r]));
                    accf[r][c] = _mm512_fmadd_ps(x, d, accf[r][c]);
                    continue;
                }
                let d = if T::ROW_D {
                    _mm512_mul_ps(T::row_d(&st[r]), d)
                } else {
                    d
                };
                accf[r][c] = _mm512_fmadd_ps(accs[r][c], d, accf[r][c]);
            }
        }
    }
    for (r, acc) in accf.iter().enumerate() {
        for (c, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.add((t0 + c) * os + 16 * r), *acc);
        }
    }
}

/// Where sub-block `js`'s integer sums of `C` tokens from `t0` start, for `R` groups:
/// `-off · Σa` for the offset types ([`SbType::OFF`]), else zero.
#[inline(always)]
unsafe fn sb_sums_start<T: SbType, const R: usize, const C: usize>(
    g: &PkArgs,
    t0: usize,
    js: usize,
) -> [[__m512i; C]; R] {
    let mut start = [_mm512_setzero_si512(); C];
    if T::OFF {
        for (c, start) in start.iter_mut().enumerate() {
            *start = _mm512_set1_epi32(*g.side.osum.as_ptr().add((t0 + c) * g.side.n_sub + js));
        }
    }
    [start; R]
}

/// Step `step` of `R` groups' unpacked tile at `tp` (group `r`'s at `tp + r * stride`) against
/// the `C` tokens' quants at `arow[c] + at`, into `acc`: one load per group, one broadcast per
/// token, `R C` `vpdpbusd`.
#[inline(always)]
unsafe fn sb_step<T: SbType, const R: usize, const C: usize>(
    tp: *const u8,
    stride: usize,
    step: usize,
    arow: &[*const u8; C],
    at: usize,
    acc: &mut [[__m512i; C]; R],
) {
    let mut w = [_mm512_setzero_si512(); R];
    for (r, w) in w.iter_mut().enumerate() {
        *w = ld512(tp.add(r * stride + T::VALS + 64 * step));
    }
    for c in 0..C {
        let a = _mm512_set1_epi32((arow[c].add(at) as *const i32).read_unaligned());
        for r in 0..R {
            acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], w[r], a);
        }
    }
}

/// Sub-block `j`'s integer sums `sums` times the `R` groups' f32 scales of it (in the unpacked
/// tile at `tp`, `stride` apart), into `accs`.
#[inline(always)]
unsafe fn sb_scale_sums<T: SbType, const R: usize, const C: usize>(
    tp: *const u8,
    stride: usize,
    j: usize,
    sums: &[[__m512i; C]; R],
    accs: &mut [[__m512; C]; R],
) {
    for r in 0..R {
        let s = _mm512_loadu_ps(tp.add(r * stride + 64 * j) as *const f32);
        for c in 0..C {
            accs[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r][c]), s, accs[r][c]);
        }
    }
}

/// `R` groups' unpacked tiles `tiles` (group `r`'s at `src + r * stride`) against `C` tokens
/// from `t0`; group `r`'s rows go to `out + 16 r`. Each activation load feeds the `R` groups. A
/// later chunk of tiles goes on from the sums stored by the earlier ones: the same float steps in
/// the same order as one pass over all tiles.
#[inline(always)]
unsafe fn sb_tile_rows<T: SbType, const R: usize, const C: usize>(
    g: &PkArgs,
    src: *const u8,
    stride: usize,
    tiles: std::ops::Range<usize>,
    t0: usize,
    out: *mut f32,
    os: usize,
) {
    let n_sub = g.side.n_sub;
    let (sd, sm) = (g.side.d.as_ptr(), g.side.msum.as_ptr());
    let qoff = g.side.qoff.as_ptr();
    let arow: [*const u8; C] = std::array::from_fn(|c| g.xq.as_ptr().add((t0 + c) * g.row_bytes));
    // Plain loops, not nested `array::from_fn`: the compiler left those closures out of line,
    // without this function's target features, so each intrinsic became a call.
    let mut accf = [[_mm512_setzero_ps(); C]; R];
    if tiles.start != 0 {
        for (r, accf) in accf.iter_mut().enumerate() {
            for (c, a) in accf.iter_mut().enumerate() {
                *a = _mm512_loadu_ps(out.add((t0 + c) * os + 16 * r));
            }
        }
    }
    let first = tiles.start;
    for tile in tiles {
        let tp = src.add((tile - first) * T::UNPACKED);
        let mut accs = [[_mm512_setzero_ps(); C]; R];
        let mut isum = [[_mm512_setzero_si512(); C]; R];
        for j in 0..T::SUBS {
            let js = tile * T::SUBS + j;
            let qo = *qoff.add(js) as usize;
            let mut acci = sb_sums_start::<T, R, C>(g, t0, js);
            for k in 0..T::STEPS {
                sb_step::<T, R, C>(tp, stride, T::STEPS * j + k, &arow, qo + 4 * k, &mut acci);
            }
            if T::INT_SUM {
                for r in 0..R {
                    let s = ld512(tp.add(r * stride + 64 * j));
                    for c in 0..C {
                        isum[r][c] = _mm512_add_epi32(isum[r][c], _mm512_mullo_epi32(acci[r][c], s));
                    }
                }
                continue;
            }
            sb_scale_sums::<T, R, C>(tp, stride, j, &acci, &mut accs);
        }
        // The minimums after the sub-blocks, into `accf` in the same order (nothing else adds to
        // it before the super-block's sum below): same bits, and eight registers fewer live in
        // the sub-block loop. Zen 4 VM, 2026-12-07, builds alternated: `kernel_bench 1 gemm 512`
        // (whose build of the loop had spilled its sums at every sub-block) Q4_K 130-141 ->
        // 155-162, Q5_K 132-136 -> 157-158 GMAC/s; `ollamars bench` (whose build had not) pp512
        // 1.1B Q4_K_M level, 297 -> 298 t/s.
        if T::MIN {
            for j in 0..T::SUBS {
                let js = tile * T::SUBS + j;
                for r in 0..R {
                    let m = _mm512_loadu_ps(tp.add(r * stride + 64 * (T::SUBS + j)) as *const f32);
                    for c in 0..C {
                        accf[r][c] =
                            _mm512_fmadd_ps(m, _mm512_set1_ps(*sm.add((t0 + c) * n_sub + js)), accf[r][c]);
                    }
                }
            }
        }
        for c in 0..C {
            let d = _mm512_set1_ps(*sd.add((t0 + c) * n_sub + tile * T::SUBS));
            for r in 0..R {
                if T::INT_SUM {
                    let dr = _mm512_loadu_ps(tp.add(r * stride + T::ROW_D_AT) as *const f32);
                    let x = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[r][c]), dr);
                    accf[r][c] = _mm512_fmadd_ps(x, d, accf[r][c]);
                    continue;
                }
                let d = if T::ROW_D {
                    _mm512_mul_ps(_mm512_loadu_ps(tp.add(r * stride + T::ROW_D_AT) as *const f32), d)
                } else {
                    d
                };
                accf[r][c] = _mm512_fmadd_ps(accs[r][c], d, accf[r][c]);
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            _mm512_storeu_ps(out.add((t0 + c) * os + 16 * r), accf[r][c]);
        }
    }
}

/// [`sb_tile_rows`] for the types without minimums or integer super-block sums (Q6_K, Q3_K,
/// IQ4_XS), two sub-blocks at a time: their `vpdpbusd` chains interleaved, 2 R C independent
/// chains where one sub-block has R C. Intel issues two `vpdpbusd` a cycle (Zen 4 one) at a
/// latency of 5, so R C = 8 chains left it waiting. The sub-blocks' float steps go in the same
/// order, and the super-block sums go on from `out` instead of being held in registers (the
/// freed registers take the second sub-block's sums): the same bits as [`sb_tile_rows`].
/// Measured 2026-12-07 on an Intel Xeon VM (family 6 model CFh), alternated with
/// [`sb_tile_rows`] in one build: `BEST=1 PACKED=1 kernel_bench 1 gemm 512 q6_k` 194-197 ->
/// 201-205 GMAC/s, Q3_K 199 -> 206; `ollamars bench -t 2`, 1.1B Q6_K, alternated with the
/// build before: pp512 301-335 -> 318-352 t/s (6 pairs, median ratio 1.07), pp64 297-323 ->
/// 331-342, pp16 210-225 -> 237-242; 1.1B Q4_K_M (21 Q6_K matrices) pp512 304-346 -> 311-347.
/// Untimed on AMD so far: the same instructions in another order, plus a load and a store of the
/// sums per super-block.
#[inline(always)]
unsafe fn sb_tile_rows_paired<T: SbType, const R: usize, const C: usize>(
    g: &PkArgs,
    src: *const u8,
    stride: usize,
    tiles: std::ops::Range<usize>,
    t0: usize,
    out: *mut f32,
    os: usize,
) {
    // Monomorphized for every type behind `sb_pair_pass`'s branch, so no const assertion.
    debug_assert!(!T::MIN && !T::INT_SUM && !T::ROW_D && T::SUBS % 2 == 0);
    let n_sub = g.side.n_sub;
    let sd = g.side.d.as_ptr();
    let qoff = g.side.qoff.as_ptr();
    let arow: [*const u8; C] = std::array::from_fn(|c| g.xq.as_ptr().add((t0 + c) * g.row_bytes));
    let first = tiles.start;
    for tile in tiles {
        let tp = src.add((tile - first) * T::UNPACKED);
        let mut accs = [[_mm512_setzero_ps(); C]; R];
        for j in (0..T::SUBS).step_by(2) {
            // Sub-block j's sums in `acci`, j + 1's in `accj`, their steps alternating.
            let js = tile * T::SUBS + j;
            let (qo, qo1) = (*qoff.add(js) as usize, *qoff.add(js + 1) as usize);
            let mut acci = sb_sums_start::<T, R, C>(g, t0, js);
            let mut accj = sb_sums_start::<T, R, C>(g, t0, js + 1);
            for k in 0..T::STEPS {
                sb_step::<T, R, C>(tp, stride, T::STEPS * j + k, &arow, qo + 4 * k, &mut acci);
                sb_step::<T, R, C>(tp, stride, T::STEPS * (j + 1) + k, &arow, qo1 + 4 * k, &mut accj);
            }
            sb_scale_sums::<T, R, C>(tp, stride, j, &acci, &mut accs);
            sb_scale_sums::<T, R, C>(tp, stride, j + 1, &accj, &mut accs);
        }
        for c in 0..C {
            let d = _mm512_set1_ps(*sd.add((t0 + c) * n_sub + tile * T::SUBS));
            for r in 0..R {
                let o = out.add((t0 + c) * os + 16 * r);
                let before = if tile == 0 {
                    _mm512_setzero_ps()
                } else {
                    _mm512_loadu_ps(o)
                };
                _mm512_storeu_ps(o, _mm512_fmadd_ps(accs[r][c], d, before));
            }
        }
    }
}

/// [`sb_body_pair`]'s pass of two groups' unpacked `tiles` over 4 tokens from `t0`: paired
/// sub-blocks where the type allows ([`sb_tile_rows_paired`]).
#[inline(always)]
unsafe fn sb_pair_pass<T: SbType>(
    g: &PkArgs,
    src: *const u8,
    stride: usize,
    tiles: std::ops::Range<usize>,
    t0: usize,
    out: *mut f32,
    os: usize,
) {
    if T::MIN || T::INT_SUM || T::ROW_D {
        sb_tile_rows::<T, 2, 4>(g, src, stride, tiles, t0, out, os)
    } else {
        sb_tile_rows_paired::<T, 2, 4>(g, src, stride, tiles, t0, out, os)
    }
}

/// Two groups (`group` and `group + gstride`) against a batch: [`sb_body`] with each
/// activation load shared by 32 rows, in tiles of 4 tokens. The last 1-3 tokens go through the
/// decode kernel in one pass over the packed tiles (in cache by then) rather than one at a time
/// over every unpacked chunk: whole prompts from an empty cache (2026-12-06, switched at run
/// time in one build and alternated, t/s) 1.1B Q6_K pp13 260.6 -> 282.4, pp15 277.3 -> 294.2,
/// pp23 340.8 -> 359.9, pp31 387.6 -> 393.2; 1.1B Q4_K_M pp19 377.0 -> 418.9, pp23 406.9 ->
/// 431.5, pp27 498.7 -> 548.5, pp67 641.0 -> 646.0. The landed build against the one before
/// (`ollamars bench -t 2`, 3 runs each, alternated): Q4_K_M pp19 386-412 -> 460-469, pp27
/// 400-490 -> 447-499, Q6_K pp13 / pp15 / pp23 level within the runs' spread (280-314 against
/// 278-306, 306-320 against 280-346, 372-401 against 366-424), pp511 and the in-cache kernels
/// (`kernel_bench 1 gemm 510`) level.
#[inline(always)]
unsafe fn sb_body_pair<T: SbType>(
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    let tail = tokens.start + tokens.len() / 4 * 4..tokens.end;
    let tokens = tokens.start..tail.start;
    let chunk = (UNPACK_CHUNK_BYTES / T::UNPACKED).max(1);
    let stride = chunk * T::UNPACKED;
    let src = unpacked_group(2 * stride);
    let n_parts = tokens.len().div_ceil(4);
    let mut s0 = 0;
    while s0 < g.n_tiles {
        let tiles = s0..(s0 + chunk).min(g.n_tiles);
        sb_unpack::<T>(group.add(s0 * T::TILE), tiles.len(), src);
        sb_unpack::<T>(group.add(gstride + s0 * T::TILE), tiles.len(), src.add(stride));
        let next = next_chunk::<T>(group, gstride, 2, tiles.end, g.n_tiles, chunk);
        let mut t = tokens.start;
        let mut part = 0;
        while t + 4 <= tokens.end {
            if n_parts <= PIECES_MAX_PARTS {
                // Tile by tile, each asking for its piece of the share: the same float steps
                // in the same order (`sb_tile_rows` goes on from the sums stored before).
                let n_pieces = n_parts * tiles.len();
                for (i, tile) in tiles.clone().enumerate() {
                    for (p, bytes) in next {
                        prefetch_share(p, bytes, part * tiles.len() + i, n_pieces);
                    }
                    let at = src.add(i * T::UNPACKED);
                    sb_pair_pass::<T>(g, at, stride, tile..tile + 1, t, out, os);
                }
            } else {
                for (p, bytes) in next {
                    prefetch_share(p, bytes, part, n_parts);
                }
                sb_pair_pass::<T>(g, src, stride, tiles.clone(), t, out, os);
            }
            t += 4;
            part += 1;
        }
        s0 = tiles.end;
    }
    few_at_a_time!(tail, t => sb_decode::<T, 2, C>(g, group, gstride, t, out, os));
}

/// Most tiles of 4 tokens for which [`sb_body_pair`] asks for the next chunk's share in pieces,
/// one before each tile of the chunk, rather than all at the start of a tile of tokens. A short
/// batch's share is large (half a chunk at 8 tokens) and asked for at once it overflowed the
/// core's miss buffers, so the next unpacking waited for memory; but running the tiles one at a
/// time stores and reloads the sums between them, 6-10% of the kernel in cache in a long batch
/// (`BEST=1 PACKED=1 kernel_bench 1 gemm 64|512 q4_k|q6_k`, pieces at every count). Measured
/// 2026-12-06 (Zen 5, two threads), before -> after, alternated: out of cache (`BEST=1 PACKED=1
/// HUGE=1 TYPES=q4_k,q6_k TOKENS=N kernel_bench 2 stream`, GB/s) Q6_K 12 tokens 18.3-18.7 ->
/// 22.6-23.4, 16 tokens 16.8-17.2 -> 21.2-21.6, 24 tokens 14.6 -> 17.6-17.9, 32 tokens
/// 12.1-12.4 -> 13.9-14.3 (Q4_K, on the decode kernels below 18 tokens: 24 tokens 12.1-12.3 ->
/// 12.8-12.9, 32 level); whole prompts (`ollamars bench -t 2`, 3 runs each, t/s) 1.1B Q6_K
/// pp12 252-255 -> 314-321, pp16 292-314 -> 392-408, pp24 392-406 -> 493-515, pp32 419-468 ->
/// 522-534, 1.1B Q4_K_M pp24 458-478 -> 488-530, pp32 level; pp512 and the in-cache kernels
/// level; 16 sequences decoding together (1.1B Q6_K) 269-305 -> 327-376 t/s. Pieces at 48
/// and 64 tokens had cost 1-5% of a prompt.
const PIECES_MAX_PARTS: usize = 8;

/// The packed bytes a batch unpacks after the chunk of tiles that ends at `end`, as one
/// `(start, bytes)` per group of the `n` groups at `group + r * gstride`: the same groups' next
/// chunk, or after their last chunk the first chunk of the `n` groups that follow (the next
/// groups of a thread's range; past its end the prefetches are wasted, never wrong).
#[inline(always)]
fn next_chunk<T: SbType>(
    group: *const u8,
    gstride: usize,
    n: usize,
    end: usize,
    n_tiles: usize,
    chunk: usize,
) -> [(*const u8, usize); 2] {
    let (base, tile, len) = if end < n_tiles {
        (group, end, chunk.min(n_tiles - end))
    } else {
        (group.wrapping_add(n * gstride), 0, chunk.min(n_tiles))
    };
    std::array::from_fn(|r| {
        if r < n {
            (base.wrapping_add(r * gstride + tile * T::TILE), len * T::TILE)
        } else {
            (base, 0)
        }
    })
}

/// Prefetches share `i` of `parts` of the `bytes` bytes at `p` into L2 (on AMD Zen 5 and later
/// into L1 without L2, as decode's streams: [`prefetch_nta`]). A batch computes on one chunk of
/// unpacked tiles while the next chunk's packed bytes (out of cache: a layer's matrices are
/// megabytes) come in, a share per tile of tokens, so unpacking them does not wait for memory.
/// Without it the unpacking of a 64-token batch (then the forward pass's row chunk) was ~20% of
/// the Q6_K kernel's time (`perf`, `PACKED=1 kernel_bench 1 gemm 64 q6_k`).
///
/// The packed bytes are read once, by the unpacking: NTA on AMD Zen 4 and later (family 19h and
/// later; only the AVX-512 kernels come here, so not Zen 3), else into L2. T1 -> NTA, whole
/// prompts from an empty cache, the two alternated in one process (8-30 pairs, median per-pair
/// ratio): on the Zen 5 VM (2026-12-06) pp512 1.1B Q6_K 1.029 / 1.019 / 1.029, Q4_K_M 1.005 /
/// 1.022, Gemma 3 270M 1.027, Qwen2.5-Coder 0.5B 0.998; pp64 Q6_K 1.033, Q4_K_M 1.001; pp16
/// Q6_K 1.045, Q4_K_M 1.039 (Q4_0 and Q8_0, which do not come here, 0.996-1.006); T2 (L3)
/// instead: Q6_K 1.022, Q4_K_M 1.006. On a Zen 4 VM (family 19h model 11h, 2026-12-06), where
/// decode's prefetches stay T1 ([`prefetch_nta`]): pp512 Q6_K 1.028 / 1.028, Q4_K_M 1.020 /
/// 1.019, Gemma 1.012, Qwen2.5 1.010; pp64 Q6_K 1.057, Q4_K_M 1.030; pp16 Q6_K 0.987, Q4_K_M
/// 1.001.
#[inline(always)]
unsafe fn prefetch_share(p: *const u8, bytes: usize, i: usize, parts: usize) {
    let nta = this_amd_family() >= 0x19;
    let lines = bytes.div_ceil(64);
    for l in i * lines / parts..(i + 1) * lines / parts {
        prefetch_stream_line(p.wrapping_add(64 * l), nta);
    }
}

/// Two packed groups, `group` and `group + gstride` (rows to `out` and `out + 16`), against
/// tokens `tokens` (the same signature as [`packed_avx512`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn packed_pair_avx512(
    ty: GgmlType,
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    if tokens.len() < unpack_min_tokens(ty) {
        pair_decode_avx512(ty, g, group, gstride, tokens, out, os);
        return;
    }
    match ty {
        GgmlType::Q6_K => sb_body_pair::<PkQ6K>(g, group, gstride, tokens, out, os),
        GgmlType::IQ4_XS => sb_body_pair::<PkIq4Xs>(g, group, gstride, tokens, out, os),
        GgmlType::Q2_K => sb_body_pair::<PkQ2K>(g, group, gstride, tokens, out, os),
        GgmlType::Q3_K => sb_body_pair::<PkQ3K>(g, group, gstride, tokens, out, os),
        GgmlType::Q4_K => sb_body_pair::<PkQ4K>(g, group, gstride, tokens, out, os),
        GgmlType::Q5_K => sb_body_pair::<PkQ5K>(g, group, gstride, tokens, out, os),
        // Two groups per tile for the types whose steps come from a few loads. Against two
        // passes of one group and 8-token tiles (2026-12-06, Zen 5, `BEST=1 PACKED=1
        // kernel_bench 1 gemm 512 TYPE`, alternated, GMAC/s): Q4_0 344-355 -> 394-397, Q5_0
        // 319-325 -> 352. Q8_0's steps are 8 loads each and spilled: 318-324 -> 277-283, so it
        // keeps the single groups.
        GgmlType::Q4_0 => packed_body512::<PkQ4_0, 2, 4>(g, group, gstride, tokens, out, os),
        GgmlType::Q5_0 => packed_body512::<PkQ5_0, 2, 4>(g, group, gstride, tokens, out, os),
        _ => {
            packed_avx512(ty, g, group, gstride, tokens.clone(), out, os);
            packed_avx512(ty, g, group.add(gstride), gstride, tokens, out.add(16), os);
        }
    }
}

/// The AMX tier's Q6_K: `n_groups` (1 or 2) packed groups from `group`, `gstride` apart (rows
/// to `out + 16 r`), against `tokens` that its tiles do not take, with the tiles' integer sums
/// and float steps ([`PkQ6KInt`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn packed_q6k_int(
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    n_groups: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    match n_groups {
        2 if tokens.len() >= PkQ6KInt::UNPACK_MIN_TOKENS => {
            sb_body_pair::<PkQ6KInt>(g, group, gstride, tokens, out, os)
        }
        2 => few_at_a_time!(tokens, t => sb_decode::<PkQ6KInt, 2, C>(g, group, gstride, t, out, os)),
        _ => sb_body::<PkQ6KInt>(g, group, tokens, out, os),
    }
}

/// Tokens from which two groups of type `ty` go through the batch kernels rather than the
/// decode kernel a few tokens per pass ([`pair_decode_avx512`]): the sub-block types'
/// [`SbType::UNPACK_MIN_TOKENS`], 8 for the 32-value types (whose batch tiles stream the groups
/// as decode does: see [`packed_body512`]).
///
/// A batch's unpacking computes in bursts between its chunks' reads, where the decode kernels'
/// prefetches ([`prefetch_part`]) keep memory streaming under the compute; that pays while a
/// pass of a few tokens costs little. Measured 2026-12-06 in one build with the limit switched
/// at run time, alternated (Zen 5, two threads), unpacked -> decode kernels: out of cache (22
/// TinyLlama-1.1B layers, `BEST=1 PACKED=1 HUGE=1 TYPES=.. TOKENS=N kernel_bench 2 stream`,
/// GB/s) 8 tokens Q4_K 17.2-17.5 -> 26.4-26.5, Q5_K 17.9-18.2 -> 26.2-27.1, IQ4_XS 17.0-17.5
/// -> 26.2, Q6_K 21.2-21.3 -> 24.4-25.5, Q3_K 13.5-14.1 -> 16.3-17.0, Q2_K 14.5-14.7 ->
/// 10.7-11.0; 12 tokens Q4_K 14.3-15.1 -> 19.7-21.0, Q5_K 15.8-16.1 -> 20.6-21.5, Q6_K
/// 17.6-18.4 -> 16.5-17.4, Q3_K 10.8-12.3 -> 10.9-12.2; 16 tokens Q4_K 13.2-14.0 -> 15.9-16.4,
/// Q5_K 14.4-14.6 -> 14.4-14.5, IQ4_XS 13.7-14.1 -> 15.2-15.4, Q3_K 10.9-11.6 -> 8.5-9.1; 20
/// tokens Q4_K 12.7-13.0 -> 12.6. Whole prompts from an empty cache, 1.1B Q4_K_M (t/s, these
/// limits against 8 for all): pp8 232.5 -> 316.0, pp12 309.7 -> 391.4, pp16 373.1 -> 401.7,
/// pp17 360.6 -> 397.4; 1.1B Q6_K pp8 197.7 -> 221.0, pp11 239.1 -> 256.9; Qwen2.5-Coder 0.5B
/// pp8 619 -> 651, pp12 765 -> 790; Gemma 3 270M level (its matrices stay in cache). Eight
/// sequences decoding together (one token each per step, depth 64): 1.1B Q4_K_M 214.0 ->
/// 293.4 t/s, 12 sequences 277.3 -> 349.4, 16 332.0 -> 354.4.
fn unpack_min_tokens(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q2_K => PkQ2K::UNPACK_MIN_TOKENS,
        GgmlType::Q3_K => PkQ3K::UNPACK_MIN_TOKENS,
        GgmlType::Q4_K => PkQ4K::UNPACK_MIN_TOKENS,
        GgmlType::Q5_K => PkQ5K::UNPACK_MIN_TOKENS,
        GgmlType::Q6_K => PkQ6K::UNPACK_MIN_TOKENS,
        GgmlType::IQ4_XS => PkIq4Xs::UNPACK_MIN_TOKENS,
        _ => 8,
    }
}

/// [`pair_decode`] over `tokens`, a few at a time ([`few`]). Out of line: as a match arm of
/// [`packed_pair_avx512`] beside the batch kernels (as it was), decode's timing did not change
/// but the 1.1B Q6_K's pp8 was 228-230 against 237-246 t/s (alternated, 3 runs each).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline(never)]
unsafe fn pair_decode_avx512(
    ty: GgmlType,
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    few_at_a_time!(tokens, t => pair_decode::<C>(ty, g, group, gstride, t, out, os));
}

/// `C` tokens from `t` (decode's one, or a few: a daemon's parallel slots) against two packed
/// groups of type `ty`, `group` and `group + gstride` (rows to `out` and `out + 16`), from the
/// packed tiles.
#[inline(always)]
unsafe fn pair_decode<const C: usize>(
    ty: GgmlType,
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    t: usize,
    out: *mut f32,
    os: usize,
) {
    match ty {
        GgmlType::Q8_0 => packed_decode512::<PkQ8_0, 2, C>(g, group, gstride, t, out, os),
        GgmlType::Q4_0 => packed_decode512::<PkQ4_0, 2, C>(g, group, gstride, t, out, os),
        GgmlType::Q4_1 => packed_decode512::<PkQ4_1, 2, C>(g, group, gstride, t, out, os),
        GgmlType::Q5_0 => packed_decode512::<PkQ5_0, 2, C>(g, group, gstride, t, out, os),
        GgmlType::Q5_1 => packed_decode512::<PkQ5_1, 2, C>(g, group, gstride, t, out, os),
        GgmlType::IQ4_NL => packed_decode512::<PkIq4Nl, 2, C>(g, group, gstride, t, out, os),
        GgmlType::Q2_K => sb_decode::<PkQ2K, 2, C>(g, group, gstride, t, out, os),
        GgmlType::Q3_K => sb_decode::<PkQ3K, 2, C>(g, group, gstride, t, out, os),
        GgmlType::Q4_K => sb_decode::<PkQ4K, 2, C>(g, group, gstride, t, out, os),
        GgmlType::Q5_K => sb_decode::<PkQ5K, 2, C>(g, group, gstride, t, out, os),
        GgmlType::Q6_K => sb_decode::<PkQ6K, 2, C>(g, group, gstride, t, out, os),
        GgmlType::IQ4_XS => sb_decode::<PkIq4Xs, 2, C>(g, group, gstride, t, out, os),
        _ => unreachable!("no packed kernel for {ty}"),
    }
}

thread_local! {
    /// Each thread's unpacked group (reused across calls).
    static UNPACKED_GROUP: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The thread's buffer for an unpacked group, at least `bytes` long and starting on a cache
/// line: the kernels read it in 64-byte loads (and AMX tile rows) at multiples of 64 from its
/// start, and from the allocator's 16-byte alignment each of those spanned two lines.
///
/// The closure only lends the buffer out: code inside a closure would not get the calling
/// kernel's target features. Nothing else touches the thread's buffer until the kernel returns.
#[inline(always)]
fn unpacked_group(bytes: usize) -> *mut u8 {
    UNPACKED_GROUP.with(|cell| {
        let mut buf = cell.borrow_mut();
        buf.resize(bytes + 64, 0);
        let p = buf.as_mut_ptr();
        p.wrapping_add(p.align_offset(64))
    })
}

/// Bytes of one group's unpacked tiles a batch works on at a time: two groups' chunks and the
/// activations of those tiles for a tile of tokens stay in L1 (48 KiB here) while every tile of
/// tokens reads them.
const UNPACK_CHUNK_BYTES: usize = 16 * 1024;

#[inline(always)]
unsafe fn sb_body<T: SbType>(
    g: &PkArgs,
    group: *const u8,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    if tokens.len() < T::UNPACK_MIN_TOKENS {
        few_at_a_time!(tokens, t => sb_decode::<T, 1, C>(g, group, 0, t, out, os));
        return;
    }
    let chunk = (UNPACK_CHUNK_BYTES / T::UNPACKED).max(1);
    let src = unpacked_group(chunk * T::UNPACKED);
    let n_parts = tokens.len().div_ceil(8);
    let mut s0 = 0;
    while s0 < g.n_tiles {
        let tiles = s0..(s0 + chunk).min(g.n_tiles);
        sb_unpack::<T>(group.add(s0 * T::TILE), tiles.len(), src);
        let gstride = g.n_tiles * T::TILE;
        let [(next, bytes), _] = next_chunk::<T>(group, gstride, 1, tiles.end, g.n_tiles, chunk);
        let mut t = tokens.start;
        let mut part = 0;
        while t + 8 <= tokens.end {
            prefetch_share(next, bytes, part, n_parts);
            sb_tile_rows::<T, 1, 8>(g, src, 0, tiles.clone(), t, out, os);
            t += 8;
            part += 1;
        }
        if t + 4 <= tokens.end {
            sb_tile_rows::<T, 1, 4>(g, src, 0, tiles.clone(), t, out, os);
            t += 4;
        }
        while t < tokens.end {
            sb_tile_rows::<T, 1, 1>(g, src, 0, tiles.clone(), t, out, os);
            t += 1;
        }
        s0 = tiles.end;
    }
}
