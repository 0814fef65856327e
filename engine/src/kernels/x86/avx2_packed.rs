//! AVX2 kernels for the packed layouts of every type that has one (see `kernels::packed`).
//!
//! A packed step is 64 bytes: four elements of 16 rows. AVX2 reads it as two 32-byte halves
//! (rows 0-7 and 8-15), each a *stream* with its own 8-lane accumulators, so one broadcast of
//! four activation bytes feeds the `maddubs` of every stream in flight. Without VNNI a step's
//! `maddubs` pair sums stay in i16 for as many steps as cannot saturate (the stored values are
//! small and unsigned: at most 15, 31 or 63), then one `madd` widens them: about two operations per
//! 32 multiply-adds, against five or more for a row-major block (unpacking, widening, scaling and a
//! horizontal sum per row). Q8_0's and IQ4_XS's signed values take the sign trick and a `madd` per
//! step.
//!
//! One kernel, [`tile_rows`], serves decode (one token, two groups: four streams, straight from
//! the packed tiles) and batches (a group unpacked once into a thread's buffer, then passed over
//! two tokens at a time). Per row and token both do the same integer sums per sub-block and the
//! same float steps in the same order, so a token gets the same bits alone or in a batch.

use std::arch::x86_64::*;

use super::{
    bytes_from_bits32, iq4nl_table, iq4xs_scale_bytes, k4_scale_bytes, ld128, ld256, ld_rows, next_stream,
    prefetch_ahead, q3k_scale_bytes, Groups, PkArgs,
};
use crate::kernels::packed::value_offset;
use crate::quant::GgmlType;

/// Offset of the bsums (16 i16 sums of 16 quants) from the first quant of a Q8_K block.
const Q8K_BSUMS: usize = 256;

/// A packed type as the AVX2 kernel sees it: tile `t`, half `h` (rows `8h..8h+8`).
trait Pk2 {
    /// Packed tile bytes.
    const TILE: usize;
    /// Sub-blocks per tile, each with one scale per row; pairs of 4-element steps per sub-block.
    const SUBS: usize;
    const PAIRS: usize;
    /// Pairs of steps whose `maddubs` sums an i16 lane holds without saturating (at most
    /// `4 · max · 128` per pair).
    const I16_PAIRS: usize;
    /// Whether the stored values are offset (integer sums start at `osum`).
    const OFF: bool;
    /// Whether the steps are signed bytes (multiplied through the sign trick, each step widened
    /// on its own: `|w|` up to 128 times a byte nearly fills an i16 pair sum).
    const SIGNED: bool = false;
    /// Whether rows have a per-sub-block minimum.
    const MIN: bool;
    /// Whether [`Pk2::scale`] leaves out the row's super-block scale ([`Pk2::row_d`]).
    const ROW_D: bool;
    /// Whether tiles stream from memory (decode prefetches ahead), not from a thread's buffer.
    const STREAMED: bool = true;
    /// Whether the sub-block scales are small integers that go into the integer sums
    /// ([`Pk2::scale16`], [`Pk2::offset16`]; see [`tile_rows`]), with `ROW_D` the only float
    /// scale. [`Pk2::scale`] is then never called.
    const INT_SCALE: bool = false;
    type St: Copy;
    unsafe fn state(t: *const u8, h: usize) -> Self::St;
    /// The 8 rows' f32 scales of sub-block `j`.
    unsafe fn scale(st: &Self::St, t: *const u8, h: usize, j: usize) -> __m256;
    /// The 8 rows' f32 minimums of sub-block `j` (with `MIN`).
    #[inline(always)]
    unsafe fn min(_st: &Self::St, _t: *const u8, _h: usize, _j: usize) -> __m256 {
        _mm256_setzero_ps()
    }
    /// With `INT_SCALE`: the 8 rows' scale of sub-block `j` as i16 pairs `(s, s)`, for a
    /// `madd` against a row's two i16 pair sums.
    #[inline(always)]
    unsafe fn scale16(_st: &Self::St, _t: *const u8, _h: usize, _j: usize) -> __m256i {
        unreachable!("only with INT_SCALE")
    }
    /// With `INT_SCALE` and `OFF`: the 8 rows' `(-off · s[2k], -off · s[2k + 1])` as i16 pairs,
    /// for a `madd` against the activations' sums of sub-blocks `2k` and `2k + 1` (Q8_K's bsums).
    #[inline(always)]
    unsafe fn offset16(_st: &Self::St, _t: *const u8, _h: usize, _k: usize) -> __m256i {
        unreachable!("only with INT_SCALE")
    }
    /// The 8 rows' super-block scale (with `ROW_D`).
    #[inline(always)]
    unsafe fn row_d(_st: &Self::St, _t: *const u8, _h: usize) -> __m256 {
        _mm256_setzero_ps()
    }
    /// Steps `2p` and `2p + 1` of sub-block `j` as unsigned bytes.
    unsafe fn pair(t: *const u8, h: usize, j: usize, p: usize) -> (__m256i, __m256i);
}

/// A nibble chunk's half at `p`: (low nibbles, high nibbles), two steps.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> (__m256i, __m256i) {
    let v = ld256(p);
    let m = _mm256_set1_epi8(0x0f);
    (
        _mm256_and_si256(v, m),
        _mm256_and_si256(_mm256_srli_epi16(v, 4), m),
    )
}

/// A nibble chunk's half at `p` of IQ4_NL / IQ4_XS indices as two steps of their (signed)
/// levels.
#[inline(always)]
unsafe fn iq4_pair(p: *const u8) -> (__m256i, __m256i) {
    let (lo, hi) = nibbles(p);
    let levels = iq4nl_table();
    (_mm256_shuffle_epi8(levels, lo), _mm256_shuffle_epi8(levels, hi))
}

/// The 8 f16 values at `p` as f32.
#[inline(always)]
unsafe fn f16x8(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(ld128(p))
}

/// 8 bytes at `p` in the low half of a vector.
#[inline(always)]
unsafe fn ld64(p: *const u8) -> __m128i {
    _mm_loadl_epi64(p as *const __m128i)
}

/// The 8 signed byte scales in the low half of `s` as i16 pairs `(s, s)`, one per row.
#[inline(always)]
unsafe fn scale_pairs(s: __m128i) -> __m256i {
    let dup = _mm256_setr_epi8(
        0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12,
        13,
    );
    _mm256_shuffle_epi8(_mm256_cvtepi8_epi32(s), dup)
}

/// The 8 rows' signed byte scales of two sub-blocks (`s`, `u`: low halves) as i16 pairs
/// `(-off · s, -off · u)`, one per row, `off` being what `ty`'s packed values are stored plus.
#[inline(always)]
unsafe fn offset_pairs(s: __m128i, u: __m128i, ty: GgmlType) -> __m256i {
    let su = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s, u));
    _mm256_mullo_epi16(su, _mm256_set1_epi16(-(value_offset(ty) as i16)))
}

/// `acc + madd(a, b)`: one `vpdpwssd` with AVX-VNNI (`V`).
#[inline(always)]
unsafe fn dpwssd<const V: bool>(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    if V {
        _mm256_dpwssd_avx_epi32(acc, a, b)
    } else {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    }
}

/// Bit `b` of each byte of `x` moved to bit `to` (16-bit shifts; the mask keeps what stayed in
/// its byte). `b` and `to` are constants once inlined, and the shifts then take immediates.
#[inline(always)]
unsafe fn bit_to(x: __m256i, b: i32, to: i32) -> __m256i {
    let v = if b <= to {
        _mm256_sll_epi16(x, _mm_cvtsi32_si128(to - b))
    } else {
        _mm256_srl_epi16(x, _mm_cvtsi32_si128(b - to))
    };
    _mm256_and_si256(v, _mm256_set1_epi8(1 << to))
}

/// The state and scale of the 32-element block types: the rows' f16 `d` (`d[16]` first in the
/// tile) is the scale.
macro_rules! block_scale {
    () => {
        type St = __m256;
        #[inline(always)]
        unsafe fn state(t: *const u8, h: usize) -> __m256 {
            f16x8(t.add(16 * h))
        }
        #[inline(always)]
        unsafe fn scale(d: &__m256, _: *const u8, _: usize, _: usize) -> __m256 {
            *d
        }
    };
}

/// The state, scale and minimum of the 32-element block types with a minimum (Q4_1, Q5_1): the
/// rows' f16 `d[16]` and `m[16]` first in the tile.
macro_rules! min_block_state {
    () => {
        #[inline(always)]
        unsafe fn state(t: *const u8, h: usize) -> (__m256, __m256) {
            (f16x8(t.add(16 * h)), f16x8(t.add(32 + 16 * h)))
        }
        #[inline(always)]
        unsafe fn scale(st: &(__m256, __m256), _: *const u8, _: usize, _: usize) -> __m256 {
            st.0
        }
        #[inline(always)]
        unsafe fn min(st: &(__m256, __m256), _: *const u8, _: usize, _: usize) -> __m256 {
            st.1
        }
    };
}

/// Per-half state of the types whose sub-block scales are small signed integers times the row's
/// `d` (Q3_K, IQ4_XS): `d` and, per sub-block, the 8 rows' scales as signed bytes.
#[derive(Clone, Copy)]
struct SignedScales<const N: usize> {
    d: __m256,
    sc: [__m128i; N],
}

impl<const N: usize> SignedScales<N> {
    /// The rows' f32 scales of sub-block `j`.
    #[inline(always)]
    unsafe fn scale(&self, j: usize) -> __m256 {
        _mm256_mul_ps(self.d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(self.sc[j])))
    }
}

struct Q8_0;
struct Q4_0;
struct Q4_1;
struct Q5_0;
struct Q5_1;
struct Iq4Nl;
struct Q2K;
struct Q3K;
struct Q4K;
struct Q5K;
struct Q6K;
struct Iq4Xs;

/// Q8_0: `d[16]`, then steps `S[0..8]` of signed bytes.
impl Pk2 for Q8_0 {
    const TILE: usize = 544;
    const SUBS: usize = 1;
    const PAIRS: usize = 4;
    const I16_PAIRS: usize = 1;
    const OFF: bool = false;
    const SIGNED: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = false;
    block_scale!();
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, _: usize, p: usize) -> (__m256i, __m256i) {
        let at = t.add(32 + 128 * p + 32 * h);
        (ld256(at), ld256(at.add(64)))
    }
}

/// Q4_0: `d[16]`, then nibble chunks `0..4`; values stored plus 8.
impl Pk2 for Q4_0 {
    const TILE: usize = 288;
    const SUBS: usize = 1;
    const PAIRS: usize = 4;
    const I16_PAIRS: usize = 4;
    const OFF: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = false;
    block_scale!();
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, _: usize, p: usize) -> (__m256i, __m256i) {
        nibbles(t.add(32 + 64 * p + 32 * h))
    }
}

/// IQ4_NL: Q4_0's tile holding indices into the IQ4_NL levels (signed, up to 127 in magnitude:
/// the sign trick, as Q8_0).
impl Pk2 for Iq4Nl {
    const TILE: usize = 288;
    const SUBS: usize = 1;
    const PAIRS: usize = 4;
    const I16_PAIRS: usize = 1;
    const OFF: bool = false;
    const SIGNED: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = false;
    block_scale!();
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, _: usize, p: usize) -> (__m256i, __m256i) {
        iq4_pair(t.add(32 + 64 * p + 32 * h))
    }
}

/// Q4_1: `d[16]`, `m[16]`, then nibble chunks `0..4`; values unsigned, no offset.
impl Pk2 for Q4_1 {
    const TILE: usize = 320;
    const SUBS: usize = 1;
    const PAIRS: usize = 4;
    const I16_PAIRS: usize = 4;
    const OFF: bool = false;
    const MIN: bool = true;
    const ROW_D: bool = false;
    type St = (__m256, __m256);
    min_block_state!();
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, _: usize, p: usize) -> (__m256i, __m256i) {
        nibbles(t.add(64 + 64 * p + 32 * h))
    }
}

/// Q5_0: `d[16]`, per step a u64 of the 5th bits (bit `4r + i`: rows 8-15 in its upper half),
/// then nibble chunks `0..4`; values stored plus 16.
impl Pk2 for Q5_0 {
    const TILE: usize = 352;
    const SUBS: usize = 1;
    const PAIRS: usize = 4;
    const I16_PAIRS: usize = 2;
    const OFF: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = false;
    block_scale!();
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, _: usize, p: usize) -> (__m256i, __m256i) {
        q5_pair(t.add(32), h, p)
    }
}

/// Q5_1: `d[16]`, `m[16]`, then Q5_0's 5th bits and nibble chunks; values unsigned, no offset.
impl Pk2 for Q5_1 {
    const TILE: usize = 384;
    const SUBS: usize = 1;
    const PAIRS: usize = 4;
    const I16_PAIRS: usize = 2;
    const OFF: bool = false;
    const MIN: bool = true;
    const ROW_D: bool = false;
    type St = (__m256, __m256);
    min_block_state!();
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, _: usize, p: usize) -> (__m256i, __m256i) {
        q5_pair(t.add(64), h, p)
    }
}

/// Steps `2p` and `2p + 1`, half `h`, of Q5_0's and Q5_1's 5-bit values from the 5th-bit masks
/// at `q` and the nibble chunks after them.
#[inline(always)]
unsafe fn q5_pair(q: *const u8, h: usize, p: usize) -> (__m256i, __m256i) {
    let (lo, hi) = nibbles(q.add(64 + 64 * p + 32 * h));
    let m = _mm256_set1_epi8(0x10);
    let top = |k: usize| _mm256_and_si256(bytes_from_bits32(q.add(8 * k + 4 * h)), m);
    (
        _mm256_or_si256(lo, top(2 * p)),
        _mm256_or_si256(hi, top(2 * p + 1)),
    )
}

/// Q4_K per-half state: `d`, `dmin`, and the 8 scales and 8 mins of each sub-block (bytes).
#[derive(Clone, Copy)]
struct Q4KSt {
    d: __m256,
    dmin: __m256,
    sc: [__m128i; 8],
    m: [__m128i; 8],
}

/// Q4_K: `d[16]`, `dmin[16]`, the 12 scale bytes as 12 x 16 bytes, nibble chunks `0..32`.
impl Pk2 for Q4K {
    const TILE: usize = 2304;
    const SUBS: usize = 8;
    const PAIRS: usize = 4;
    const I16_PAIRS: usize = 4;
    const OFF: bool = false;
    const MIN: bool = true;
    const ROW_D: bool = true;
    type St = Q4KSt;
    #[inline(always)]
    unsafe fn state(t: *const u8, h: usize) -> Q4KSt {
        let (sc, m) = k4_scale_bytes(ld_rows::<12, 8>(t.add(64 + 8 * h)));
        Q4KSt {
            d: f16x8(t.add(16 * h)),
            dmin: f16x8(t.add(32 + 16 * h)),
            sc,
            m,
        }
    }
    #[inline(always)]
    unsafe fn scale(st: &Q4KSt, _: *const u8, _: usize, j: usize) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(st.sc[j]))
    }
    #[inline(always)]
    unsafe fn min(st: &Q4KSt, _: *const u8, _: usize, j: usize) -> __m256 {
        _mm256_mul_ps(st.dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(st.m[j])))
    }
    #[inline(always)]
    unsafe fn row_d(st: &Q4KSt, _: *const u8, _: usize) -> __m256 {
        st.d
    }
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, j: usize, p: usize) -> (__m256i, __m256i) {
        nibbles(t.add(256 + 64 * (4 * j + p) + 32 * h))
    }
}

/// The 8 rows' nibble at bit `at` (0: scale, 4: min) of Q2_K tile `t`'s scale byte `j`, half `h`.
#[inline(always)]
unsafe fn q2k_nibble(t: *const u8, h: usize, j: usize, at: i32) -> __m256i {
    let v = ld256(t.add(64 + 64 * (j / 4) + 32 * h));
    let shift = _mm_cvtsi32_si128(8 * (j % 4) as i32 + at);
    _mm256_and_si256(_mm256_srl_epi32(v, shift), _mm256_set1_epi32(15))
}

/// Steps `2p` and `2p + 1` of a chunk `v` of 2-bit fields (step `s` at bits `2s..2s+2`).
#[inline(always)]
unsafe fn two_bit_pair(v: __m256i, p: usize) -> (__m256i, __m256i) {
    let m3 = _mm256_set1_epi8(3);
    let (a, b) = if p == 0 {
        (v, _mm256_srli_epi16(v, 2))
    } else {
        (_mm256_srli_epi16(v, 4), _mm256_srli_epi16(v, 6))
    };
    (_mm256_and_si256(a, m3), _mm256_and_si256(b, m3))
}

/// Q2_K: `d[16]`, `dmin[16]`, the 16 scale bytes (scale | min << 4) as 4 steps, then 16 chunks
/// of the 2-bit values (chunk `j` is sub-block `j`).
impl Pk2 for Q2K {
    const TILE: usize = 1344;
    const SUBS: usize = 16;
    const PAIRS: usize = 2;
    const I16_PAIRS: usize = 2;
    const OFF: bool = false;
    const MIN: bool = true;
    const ROW_D: bool = true;
    /// `d` and `dmin`; the scale bytes are read per sub-block.
    type St = (__m256, __m256);
    #[inline(always)]
    unsafe fn state(t: *const u8, h: usize) -> (__m256, __m256) {
        (f16x8(t.add(16 * h)), f16x8(t.add(32 + 16 * h)))
    }
    #[inline(always)]
    unsafe fn scale(_: &(__m256, __m256), t: *const u8, h: usize, j: usize) -> __m256 {
        _mm256_cvtepi32_ps(q2k_nibble(t, h, j, 0))
    }
    #[inline(always)]
    unsafe fn min(st: &(__m256, __m256), t: *const u8, h: usize, j: usize) -> __m256 {
        _mm256_mul_ps(st.1, _mm256_cvtepi32_ps(q2k_nibble(t, h, j, 4)))
    }
    #[inline(always)]
    unsafe fn row_d(st: &(__m256, __m256), _: *const u8, _: usize) -> __m256 {
        st.0
    }
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, j: usize, p: usize) -> (__m256i, __m256i) {
        two_bit_pair(ld256(t.add(320 + 64 * j + 32 * h)), p)
    }
}

/// Q3_K: `d[16]`, the 12 scale bytes as 12 x 16 bytes, 16 chunks of the low 2 bits (chunk `j` is
/// sub-block `j`), then 8 chunks of the 3rd bits (chunk `c`, bit `s`: step `8c + s`); values
/// stored plus 4.
impl Pk2 for Q3K {
    const TILE: usize = 1760;
    const SUBS: usize = 16;
    const PAIRS: usize = 2;
    const I16_PAIRS: usize = 2;
    const OFF: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = true;
    const INT_SCALE: bool = true;
    type St = SignedScales<16>;
    #[inline(always)]
    unsafe fn state(t: *const u8, h: usize) -> SignedScales<16> {
        let sc = q3k_scale_bytes(ld_rows::<12, 8>(t.add(32 + 8 * h)));
        SignedScales {
            d: f16x8(t.add(16 * h)),
            sc,
        }
    }
    #[inline(always)]
    unsafe fn scale(_: &SignedScales<16>, _: *const u8, _: usize, _: usize) -> __m256 {
        unreachable!("Q3_K's scales are integers")
    }
    #[inline(always)]
    unsafe fn scale16(st: &SignedScales<16>, _: *const u8, _: usize, j: usize) -> __m256i {
        scale_pairs(st.sc[j])
    }
    #[inline(always)]
    unsafe fn offset16(st: &SignedScales<16>, _: *const u8, _: usize, k: usize) -> __m256i {
        offset_pairs(st.sc[2 * k], st.sc[2 * k + 1], GgmlType::Q3_K)
    }
    #[inline(always)]
    unsafe fn row_d(st: &SignedScales<16>, _: *const u8, _: usize) -> __m256 {
        st.d
    }
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, j: usize, p: usize) -> (__m256i, __m256i) {
        let (lo0, lo1) = two_bit_pair(ld256(t.add(224 + 64 * j + 32 * h)), p);
        // Step 4j + s's 3rd bit is bit 4(j % 2) + s of its byte: moved to bit 2.
        let bits = ld256(t.add(1248 + 64 * (j / 2) + 32 * h));
        let b = (4 * (j % 2) + 2 * p) as i32;
        (
            _mm256_or_si256(lo0, bit_to(bits, b, 2)),
            _mm256_or_si256(lo1, bit_to(bits, b + 1, 2)),
        )
    }
}

/// Q5_K: Q4_K's tile, then 8 chunks of the 5th bits (chunk `j` is sub-block `j`: bit `s` of a
/// byte belongs to its step `s`).
impl Pk2 for Q5K {
    const TILE: usize = 2816;
    const SUBS: usize = 8;
    const PAIRS: usize = 4;
    const I16_PAIRS: usize = 2;
    const OFF: bool = false;
    const MIN: bool = true;
    const ROW_D: bool = true;
    type St = Q4KSt;
    #[inline(always)]
    unsafe fn state(t: *const u8, h: usize) -> Q4KSt {
        Q4K::state(t, h)
    }
    #[inline(always)]
    unsafe fn scale(st: &Q4KSt, t: *const u8, h: usize, j: usize) -> __m256 {
        Q4K::scale(st, t, h, j)
    }
    #[inline(always)]
    unsafe fn min(st: &Q4KSt, t: *const u8, h: usize, j: usize) -> __m256 {
        Q4K::min(st, t, h, j)
    }
    #[inline(always)]
    unsafe fn row_d(st: &Q4KSt, t: *const u8, h: usize) -> __m256 {
        Q4K::row_d(st, t, h)
    }
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, j: usize, p: usize) -> (__m256i, __m256i) {
        let (lo, hi) = Q4K::pair(t, h, j, p);
        let bits = ld256(t.add(2304 + 64 * j + 32 * h));
        let b = 2 * p as i32;
        (
            _mm256_or_si256(lo, bit_to(bits, b, 4)),
            _mm256_or_si256(hi, bit_to(bits, b + 1, 4)),
        )
    }
}

/// IQ4_XS: `d[16]`, the 6 scale bytes of each row (`scales_h`, `scales_l`) as 6 x 16 bytes,
/// nibble chunks `0..32` of indices into the IQ4_NL levels (signed, up to 127 in magnitude:
/// the sign trick, as Q8_0).
impl Pk2 for Iq4Xs {
    const TILE: usize = 2176;
    const SUBS: usize = 8;
    const PAIRS: usize = 4;
    const I16_PAIRS: usize = 1;
    const OFF: bool = false;
    const SIGNED: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = false;
    type St = SignedScales<8>;
    #[inline(always)]
    unsafe fn state(t: *const u8, h: usize) -> SignedScales<8> {
        let sc = iq4xs_scale_bytes(ld_rows::<6, 8>(t.add(32 + 8 * h)));
        SignedScales {
            d: f16x8(t.add(16 * h)),
            sc,
        }
    }
    #[inline(always)]
    unsafe fn scale(st: &SignedScales<8>, _: *const u8, _: usize, j: usize) -> __m256 {
        st.scale(j)
    }
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, j: usize, p: usize) -> (__m256i, __m256i) {
        iq4_pair(t.add(128 + 64 * (4 * j + p) + 32 * h))
    }
}

/// Q6_K: `d[16]`, the 16 signed sub-block scales as 16 x 16 bytes, nibble chunks `0..32` of the
/// low 4 bits, then 16 chunks of the top 2 bits (chunk `j` holds sub-block `j`'s four steps at
/// bits `2s..2s+2`); values stored plus 32.
impl Pk2 for Q6K {
    const TILE: usize = 3360;
    const SUBS: usize = 16;
    const PAIRS: usize = 2;
    const I16_PAIRS: usize = 1;
    const OFF: bool = true;
    const MIN: bool = false;
    const ROW_D: bool = true;
    const INT_SCALE: bool = true;
    type St = __m256;
    #[inline(always)]
    unsafe fn state(t: *const u8, h: usize) -> __m256 {
        f16x8(t.add(16 * h))
    }
    #[inline(always)]
    unsafe fn scale(_: &__m256, _: *const u8, _: usize, _: usize) -> __m256 {
        unreachable!("Q6_K's scales are integers")
    }
    #[inline(always)]
    unsafe fn scale16(_: &__m256, t: *const u8, h: usize, j: usize) -> __m256i {
        scale_pairs(ld64(t.add(32 + 16 * j + 8 * h)))
    }
    #[inline(always)]
    unsafe fn offset16(_: &__m256, t: *const u8, h: usize, k: usize) -> __m256i {
        let at = t.add(32 + 32 * k + 8 * h);
        offset_pairs(ld64(at), ld64(at.add(16)), GgmlType::Q6_K)
    }
    #[inline(always)]
    unsafe fn row_d(d: &__m256, _: *const u8, _: usize) -> __m256 {
        *d
    }
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, j: usize, p: usize) -> (__m256i, __m256i) {
        let (lo, hi) = nibbles(t.add(288 + 64 * (2 * j + p) + 32 * h));
        let qh = ld256(t.add(2336 + 64 * j + 32 * h));
        let m = _mm256_set1_epi8(0x30);
        // Step 2p's top bits are at bits 4p..4p+2 of each byte, step 2p+1's at 4p+2..4p+4:
        // both moved to bits 4..6 (16-bit shifts, the mask keeps what stayed in its byte).
        let (t0, t1) = if p == 0 {
            (_mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 2))
        } else {
            (qh, _mm256_srli_epi16(qh, 2))
        };
        (
            _mm256_or_si256(lo, _mm256_and_si256(t0, m)),
            _mm256_or_si256(hi, _mm256_and_si256(t1, m)),
        )
    }
}

/// `G` packed groups (group `g` at `group + g * gstride`, its rows to `out + 16 g`) against the
/// `C` tokens from `t0`, into `out[t * os + ..]`. Each activation broadcast feeds the `2G` half
/// streams; each unpacked step feeds the `C` tokens. Decode (`C = 1`) prefetches the stream ahead.
/// With `V` (AVX-VNNI) each step is one `vpdpbusd` (see [`vnni_pair`]) in place of the `maddubs`
/// pair sums and their widening: the same integers, so both give the same bits.
///
/// Q6_K's and Q3_K's (`INT_SCALE`) 16 sub-blocks of 16 have small signed integer scales. A
/// float step per sub-block (convert, scale, multiply-add: 6 operations per row half and token,
/// against 4 for its 16 multiply-adds) made these the slowest types; instead each i16 pair sum
/// is widened by a `madd` with the rows' scale in both halves (the `madd` it needs anyway), the
/// offset terms (values are stored plus 32 or 4) come as one `madd` of `-off · scale` pairs with
/// two sub-blocks' Q8_K bsums, and the tile ends with one float step, as llama.cpp's AVX2 dot
/// products do (with `V` too: there `vpdpwssd` is that `madd` and its add). Nothing overflows:
/// `|Σ| ≤ 256 · 63 · 127 · 128 < 2^31` for Q6_K.
#[inline(always)]
unsafe fn tile_rows<T: Pk2, const G: usize, const C: usize, const V: bool>(
    g: &PkArgs,
    group: *const u8,
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
    let ones = _mm256_set1_epi16(1);
    let mut accf = [[[_mm256_setzero_ps(); C]; 2]; G];
    for tile in 0..g.n_tiles {
        let tp: [*const u8; G] = std::array::from_fn(|i| group.add(i * gstride + tile * T::TILE));
        let mut st = [[T::state(tp[0], 0); 2]; G];
        for i in 0..G {
            for h in 0..2 {
                st[i][h] = T::state(tp[i], h);
            }
        }
        let mut accs = [[[_mm256_setzero_ps(); C]; 2]; G];
        // With `INT_SCALE`: the tile's scaled integer sums.
        let mut acct = [[[_mm256_setzero_si256(); C]; 2]; G];
        for j in 0..T::SUBS {
            if T::STREAMED && C == 1 {
                // The tile's lines spread over its sub-blocks (see `prefetch_part`).
                let lines = T::TILE.div_ceil(64);
                let (l0, l1) = (j * lines / T::SUBS, (j + 1) * lines / T::SUBS);
                for p in tp {
                    let at = tile * T::TILE + 64 * l0;
                    let p = next_stream::<G>(p, at, groups);
                    prefetch_ahead(p.wrapping_add(64 * l0), 64 * (l1 - l0));
                }
            }
            let js = tile * T::SUBS + j;
            let qo = *qoff.add(js) as usize;
            let mut acci = [[[_mm256_setzero_si256(); C]; 2]; G];
            let mut sc16 = [[_mm256_setzero_si256(); 2]; G];
            if T::INT_SCALE {
                for i in 0..G {
                    for h in 0..2 {
                        sc16[i][h] = T::scale16(&st[i][h], tp[i], h, j);
                    }
                }
                if T::OFF && j % 2 == 1 {
                    // Sub-blocks j - 1 and j's offset terms against their bsums (an i16 pair).
                    let bs = *qoff.add(tile * T::SUBS) as usize + Q8K_BSUMS + 2 * (j - 1);
                    let mut o = [[_mm256_setzero_si256(); 2]; G];
                    for i in 0..G {
                        for h in 0..2 {
                            o[i][h] = T::offset16(&st[i][h], tp[i], h, j / 2);
                        }
                    }
                    for c in 0..C {
                        let b = _mm256_set1_epi32((arow[c].add(bs) as *const i32).read_unaligned());
                        for i in 0..G {
                            for h in 0..2 {
                                acct[i][h][c] = dpwssd::<V>(acct[i][h][c], o[i][h], b);
                            }
                        }
                    }
                }
            } else if T::OFF {
                for c in 0..C {
                    let init = _mm256_set1_epi32(*so.add((t0 + c) * n_sub + js));
                    for acc in acci.iter_mut().flatten() {
                        acc[c] = init;
                    }
                }
            }
            for p0 in (0..T::PAIRS).step_by(T::I16_PAIRS) {
                // The `maddubs` pair sums in i16, or (`V`) the odd steps' i32 chain.
                let mut s16 = [[[_mm256_setzero_si256(); C]; 2]; G];
                for p in p0..p0 + T::I16_PAIRS {
                    // A plain loop, not `array::from_fn`: a closure's body would not get this
                    // function's target features.
                    let mut a = [(_mm256_setzero_si256(), _mm256_setzero_si256()); C];
                    for (a, row) in a.iter_mut().zip(arow) {
                        let q = row.add(qo + 8 * p);
                        *a = (
                            _mm256_set1_epi32((q as *const i32).read_unaligned()),
                            _mm256_set1_epi32((q.add(4) as *const i32).read_unaligned()),
                        );
                    }
                    for i in 0..G {
                        for h in 0..2 {
                            let (w0, w1) = T::pair(tp[i], h, j, p);
                            if T::SIGNED {
                                // |w| * (a * sign(w)), each step widened at once.
                                let (u0, u1) = (_mm256_sign_epi8(w0, w0), _mm256_sign_epi8(w1, w1));
                                for c in 0..C {
                                    if V {
                                        let s = (_mm256_sign_epi8(a[c].0, w0), _mm256_sign_epi8(a[c].1, w1));
                                        vnni_pair(&mut acci[i][h][c], &mut s16[i][h][c], (u0, u1), s, C);
                                        continue;
                                    }
                                    let x0 = _mm256_maddubs_epi16(u0, _mm256_sign_epi8(a[c].0, w0));
                                    let x1 = _mm256_maddubs_epi16(u1, _mm256_sign_epi8(a[c].1, w1));
                                    let x = _mm256_add_epi32(
                                        _mm256_madd_epi16(x0, ones),
                                        _mm256_madd_epi16(x1, ones),
                                    );
                                    acci[i][h][c] = _mm256_add_epi32(acci[i][h][c], x);
                                }
                                continue;
                            }
                            for c in 0..C {
                                if V && !T::INT_SCALE {
                                    vnni_pair(&mut acci[i][h][c], &mut s16[i][h][c], (w0, w1), a[c], C);
                                    continue;
                                }
                                let x = _mm256_add_epi16(
                                    _mm256_maddubs_epi16(w0, a[c].0),
                                    _mm256_maddubs_epi16(w1, a[c].1),
                                );
                                s16[i][h][c] = _mm256_add_epi16(s16[i][h][c], x);
                            }
                        }
                    }
                }
                if T::INT_SCALE {
                    for i in 0..G {
                        for h in 0..2 {
                            for c in 0..C {
                                acct[i][h][c] = dpwssd::<V>(acct[i][h][c], s16[i][h][c], sc16[i][h]);
                            }
                        }
                    }
                    continue;
                }
                if (T::SIGNED && !V) || (V && C > 1) {
                    continue;
                }
                for i in 0..G {
                    for h in 0..2 {
                        for c in 0..C {
                            let x = if V {
                                s16[i][h][c]
                            } else {
                                _mm256_madd_epi16(s16[i][h][c], ones)
                            };
                            acci[i][h][c] = _mm256_add_epi32(acci[i][h][c], x);
                        }
                    }
                }
            }
            if T::INT_SCALE {
                // No float step per sub-block: the scales are in `acct`.
                continue;
            }
            for i in 0..G {
                for h in 0..2 {
                    let s = T::scale(&st[i][h], tp[i], h, j);
                    for c in 0..C {
                        accs[i][h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acci[i][h][c]), s, accs[i][h][c]);
                    }
                }
            }
        }
        // The minimums after the sub-blocks, into `accf` in the same order (same bits): AVX2
        // has 16 registers, and the sub-block loop no longer holds `accf` in them. Zen 4 VM,
        // 2026-12-07, builds alternated, `OLLAMARS_ISA=avx2 ollamars bench -p 512`: 1.1B Q4_K_M
        // 185.5-188.8 -> 193.2-194.9 t/s, Qwen2.5-Coder 0.5B 404-416 -> 414-419.
        if T::MIN {
            for j in 0..T::SUBS {
                let js = tile * T::SUBS + j;
                for i in 0..G {
                    for h in 0..2 {
                        let m = T::min(&st[i][h], tp[i], h, j);
                        for c in 0..C {
                            let x = _mm256_set1_ps(*sm.add((t0 + c) * n_sub + js));
                            accf[i][h][c] = _mm256_fmadd_ps(m, x, accf[i][h][c]);
                        }
                    }
                }
            }
        }
        // The activations have one scale per tile (a Q8_0 block, a Q8_K super-block).
        for c in 0..C {
            let d = _mm256_set1_ps(*sd.add((t0 + c) * n_sub + tile * T::SUBS));
            for i in 0..G {
                for h in 0..2 {
                    let d = if T::ROW_D {
                        _mm256_mul_ps(T::row_d(&st[i][h], tp[i], h), d)
                    } else {
                        d
                    };
                    let acc = if T::INT_SCALE {
                        _mm256_cvtepi32_ps(acct[i][h][c])
                    } else {
                        accs[i][h][c]
                    };
                    accf[i][h][c] = _mm256_fmadd_ps(acc, d, accf[i][h][c]);
                }
            }
        }
    }
    for i in 0..G {
        for h in 0..2 {
            for c in 0..C {
                _mm256_storeu_ps(out.add((t0 + c) * os + 16 * i + 8 * h), accf[i][h][c]);
            }
        }
    }
}

/// Steps `w.0` and `w.1` times activations `a.0` and `a.1` added to `acc` (AVX-VNNI). With one
/// token (`c == 1`, decode) the odd step goes to a second chain, `odd`, added at the sub-block's
/// end: a step then waits for half as many `vpdpbusd`s. Batches have chains enough in their
/// tokens, and the registers for four tokens only with one chain each (AVX2 has 16).
#[inline(always)]
unsafe fn vnni_pair(
    acc: &mut __m256i,
    odd: &mut __m256i,
    w: (__m256i, __m256i),
    a: (__m256i, __m256i),
    c: usize,
) {
    *acc = _mm256_dpbusd_avx_epi32(*acc, w.0, a.0);
    if c == 1 {
        *odd = _mm256_dpbusd_avx_epi32(*odd, w.1, a.1);
    } else {
        *acc = _mm256_dpbusd_avx_epi32(*acc, w.1, a.1);
    }
}

/// `T`'s tiles unpacked into a thread's buffer for a batch: per tile the rows' f32 scales of each
/// sub-block (16 per 64 bytes, half `h` at `32h`; with `INT_SCALE` the i16 pairs of
/// [`Pk2::scale16`]), then (with `MIN`) the f32 minimums, then (with `INT_SCALE` and `OFF`) the
/// [`Pk2::offset16`] pairs of each two sub-blocks, then (with `ROW_D`) the f32 super-block
/// scales, then the values as plain 64-byte steps. The kernel reads
/// it as it reads `T`, with the very floats `T` computes, so a batch's bits are decode's.
struct Unpacked<T>(std::marker::PhantomData<T>);

impl<T: Pk2> Unpacked<T> {
    const OFFSET_AT: usize = T::SUBS * 64 * (1 + T::MIN as usize);
    const ROW_D_AT: usize = Self::OFFSET_AT + T::SUBS / 2 * 64 * (T::INT_SCALE && T::OFF) as usize;
    const VALS: usize = Self::ROW_D_AT + 64 * T::ROW_D as usize;
    /// Offset of step `2p` of sub-block `j`.
    const fn step(j: usize, p: usize) -> usize {
        Self::VALS + 128 * (T::PAIRS * j + p)
    }
}

impl<T: Pk2> Pk2 for Unpacked<T> {
    const TILE: usize = Self::VALS + 128 * T::SUBS * T::PAIRS;
    const SUBS: usize = T::SUBS;
    const PAIRS: usize = T::PAIRS;
    const I16_PAIRS: usize = T::I16_PAIRS;
    const OFF: bool = T::OFF;
    const SIGNED: bool = T::SIGNED;
    const MIN: bool = T::MIN;
    const ROW_D: bool = T::ROW_D;
    const STREAMED: bool = false;
    const INT_SCALE: bool = T::INT_SCALE;
    type St = ();
    #[inline(always)]
    unsafe fn state(_: *const u8, _: usize) {}
    #[inline(always)]
    unsafe fn scale(_: &(), t: *const u8, h: usize, j: usize) -> __m256 {
        _mm256_loadu_ps(t.add(64 * j + 32 * h) as *const f32)
    }
    #[inline(always)]
    unsafe fn scale16(_: &(), t: *const u8, h: usize, j: usize) -> __m256i {
        ld256(t.add(64 * j + 32 * h))
    }
    #[inline(always)]
    unsafe fn offset16(_: &(), t: *const u8, h: usize, k: usize) -> __m256i {
        ld256(t.add(Self::OFFSET_AT + 64 * k + 32 * h))
    }
    #[inline(always)]
    unsafe fn min(_: &(), t: *const u8, h: usize, j: usize) -> __m256 {
        _mm256_loadu_ps(t.add(64 * (T::SUBS + j) + 32 * h) as *const f32)
    }
    #[inline(always)]
    unsafe fn row_d(_: &(), t: *const u8, h: usize) -> __m256 {
        _mm256_loadu_ps(t.add(Self::ROW_D_AT + 32 * h) as *const f32)
    }
    #[inline(always)]
    unsafe fn pair(t: *const u8, h: usize, j: usize, p: usize) -> (__m256i, __m256i) {
        let at = t.add(Self::step(j, p) + 32 * h);
        (ld256(at), ld256(at.add(64)))
    }
}

/// Unpacks a group's `n_tiles` tiles of `T` into `buf` (`n_tiles` tiles of `Unpacked<T>`).
#[inline(always)]
unsafe fn unpack<T: Pk2>(group: *const u8, n_tiles: usize, buf: *mut u8) {
    for tile in 0..n_tiles {
        let tp = group.add(tile * T::TILE);
        let bp = buf.add(tile * Unpacked::<T>::TILE);
        for h in 0..2 {
            let st = T::state(tp, h);
            if T::ROW_D {
                let at = bp.add(Unpacked::<T>::ROW_D_AT + 32 * h) as *mut f32;
                _mm256_storeu_ps(at, T::row_d(&st, tp, h));
            }
            for j in 0..T::SUBS {
                let at = bp.add(64 * j + 32 * h);
                if T::INT_SCALE {
                    _mm256_storeu_si256(at as *mut __m256i, T::scale16(&st, tp, h, j));
                    if T::OFF && j % 2 == 0 {
                        let at = bp.add(Unpacked::<T>::OFFSET_AT + 64 * (j / 2) + 32 * h);
                        _mm256_storeu_si256(at as *mut __m256i, T::offset16(&st, tp, h, j / 2));
                    }
                } else {
                    _mm256_storeu_ps(at as *mut f32, T::scale(&st, tp, h, j));
                }
                if T::MIN {
                    let at = bp.add(64 * (T::SUBS + j) + 32 * h) as *mut f32;
                    _mm256_storeu_ps(at, T::min(&st, tp, h, j));
                }
                for p in 0..T::PAIRS {
                    let (w0, w1) = T::pair(tp, h, j, p);
                    let at = bp.add(Unpacked::<T>::step(j, p) + 32 * h);
                    _mm256_storeu_si256(at as *mut __m256i, w0);
                    _mm256_storeu_si256(at.add(64) as *mut __m256i, w1);
                }
            }
        }
    }
}

/// Tokens from which the AVX2 tier unpacks a group for a batch. Its decode passes are
/// compute-bound: out of cache (two threads, `OLLAMARS_ISA=avx2 ... kernel_bench 2 stream`,
/// alternated, ms per step), unpacked against one token at a time from the packed tiles, 8
/// tokens Q4_K 55.6-56.1 against 56.7-62.6, Q6_K 66.9-67.2 against 74.3-78.8; 12 tokens Q4_K
/// 71.2 against 94.5-98.7, Q6_K 81.9-83.6 against 116.3-117.4.
const AVX2_UNPACK_MIN_TOKENS: usize = 8;

/// `G` groups against tokens `tokens`: decode (and batches too short to unpack for) reads both
/// groups side by side from the packed tiles, one token at a time; a batch unpacks one group at
/// a time and passes over it with two tokens at a time (four with AVX-VNNI).
#[inline(always)]
unsafe fn body<T: Pk2, const G: usize, const V: bool>(
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    if tokens.len() < AVX2_UNPACK_MIN_TOKENS {
        for t in tokens {
            tile_rows::<T, G, 1, V>(g, group, gstride, t, out, os);
        }
        return;
    }
    let buf = super::unpacked_group(g.n_tiles * Unpacked::<T>::TILE);
    for i in 0..G {
        unpack::<T>(group.add(i * gstride), g.n_tiles, buf);
        let out = out.add(16 * i);
        let mut t = tokens.start;
        // AVX-VNNI needs no registers for i16 sums: four tokens per pass share each step's load.
        while V && t + 4 <= tokens.end {
            tile_rows::<Unpacked<T>, 1, 4, V>(g, buf, 0, t, out, os);
            t += 4;
        }
        while t + 2 <= tokens.end {
            tile_rows::<Unpacked<T>, 1, 2, V>(g, buf, 0, t, out, os);
            t += 2;
        }
        if t < tokens.end {
            tile_rows::<Unpacked<T>, 1, 1, V>(g, buf, 0, t, out, os);
        }
    }
}

/// `n_groups` (1 or 2) packed groups from `group` (`gstride` bytes apart; rows to `out + 16 g`)
/// against tokens `tokens`: `out[t * os + r]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(in crate::kernels) unsafe fn packed_avx2(
    ty: GgmlType,
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    n_groups: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    packed::<false>(ty, g, group, gstride, n_groups, tokens, out, os)
}

/// [`packed_avx2`] with AVX-VNNI's `vpdpbusd` (the same bits).
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
#[allow(clippy::too_many_arguments)]
pub(in crate::kernels) unsafe fn packed_avxvnni(
    ty: GgmlType,
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    n_groups: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    packed::<true>(ty, g, group, gstride, n_groups, tokens, out, os)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn packed<const V: bool>(
    ty: GgmlType,
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    n_groups: usize,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
) {
    macro_rules! run {
        ($t:ty) => {
            if n_groups == 2 {
                body::<$t, 2, V>(g, group, gstride, tokens, out, os)
            } else {
                body::<$t, 1, V>(g, group, gstride, tokens, out, os)
            }
        };
    }
    match ty {
        GgmlType::Q8_0 => run!(Q8_0),
        GgmlType::Q4_0 => run!(Q4_0),
        GgmlType::Q4_1 => run!(Q4_1),
        GgmlType::Q5_0 => run!(Q5_0),
        GgmlType::Q5_1 => run!(Q5_1),
        GgmlType::IQ4_NL => run!(Iq4Nl),
        GgmlType::Q2_K => run!(Q2K),
        GgmlType::Q3_K => run!(Q3K),
        GgmlType::Q4_K => run!(Q4K),
        GgmlType::Q5_K => run!(Q5K),
        GgmlType::Q6_K => run!(Q6K),
        GgmlType::IQ4_XS => run!(Iq4Xs),
        _ => unreachable!("no AVX2 packed kernel for {ty}"),
    }
}
