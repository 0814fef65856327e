//! e^x for x <= 0 as a polynomial of fused multiply-adds, in scalar code and in AVX-512 / AVX2 /
//! NEON vectors that compute the same bits: the softmax of attention and SiLU ([`super::act`]) take
//! it, so their SIMD tiers agree bit for bit with their scalar code.
//!
//! Method: x = n·ln2 + r with n = round(x·log2 e) (by adding 1.5·2^23) and ln2 split in two
//! parts, e^r by its Taylor polynomial of degree 7 (|r| <= ln2/2), then the exponent n added to
//! the result's bits.

const MIN_X: f32 = -87.0;
const LOG2E: f32 = std::f32::consts::LOG2_E;
const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
// Taylor coefficients of e^r, r in [-ln2/2, ln2/2] (degree 7: < 1e-8 relative truncation).
const C: [f32; 8] = [
    1.0,
    1.0,
    0.5,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
];

/// e^x for x <= 0, 0 below -87 and for -inf or NaN. Within about 2 ulp of `f32::exp`; the SIMD
/// versions compute the same bits.
#[inline]
pub fn exp_neg(x: f32) -> f32 {
    // (`!(x >= MIN_X)` is true for NaN as well.)
    if x.partial_cmp(&MIN_X).is_none_or(|o| o.is_lt()) {
        return 0.0;
    }
    let t = x * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = C[7];
    for &c in C[..7].iter().rev() {
        p = p.mul_add(r, c);
    }
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use super::{C, LN2_HI, LN2_LO, LOG2E, MAGIC, MIN_X};

    /// [`super::exp_neg`] of 16 lanes (callers enable AVX-512F). Two steps take one instruction
    /// each here for the same bits: `n` is rounded to the nearest integer (ties to even) as
    /// adding and taking off `MAGIC` does for `|x log2 e| < 2^22`, and `p 2^n` is `vscalefps`,
    /// exact as the scalar code's multiply by the bits of `2^n` is (`n >= -126` where `ok`, and
    /// then `p > 1` at `n = -126`: no subnormal result). 13 instructions where the scalar
    /// code's steps take 17: 16 lanes in 8.6 cycles' time where they took 10.3 (a throwaway
    /// loop over 4096 values in L1, one thread, alternated four times: 1.44-1.57 ms against
    /// 1.80-1.99 ms for 2000 passes); the softmax weights of attention and SiLU take it.
    #[inline(always)]
    pub unsafe fn exp512(x: __m512) -> __m512 {
        let ok = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(MIN_X));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
            x,
            _mm512_set1_ps(LOG2E),
        ));
        let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
        let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
        let mut p = _mm512_set1_ps(C[7]);
        for k in (0..7).rev() {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C[k]));
        }
        _mm512_maskz_scalef_ps(ok, p, n)
    }

    /// [`super::exp_neg`] of 8 lanes (callers enable AVX2 and FMA).
    #[inline(always)]
    pub unsafe fn exp256(x: __m256) -> __m256 {
        let ok = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(MIN_X));
        let t = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _mm256_set1_ps(MAGIC));
        let n = _mm256_sub_ps(t, _mm256_set1_ps(MAGIC));
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x);
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
        let mut p = _mm256_set1_ps(C[7]);
        for k in (0..7).rev() {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C[k]));
        }
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
        _mm256_and_ps(ok, _mm256_mul_ps(p, _mm256_castsi256_ps(e)))
    }
}

#[cfg(target_arch = "aarch64")]
pub(super) mod neon {
    use std::arch::aarch64::*;

    use super::{C, LN2_HI, LN2_LO, LOG2E, MAGIC, MIN_X};

    /// [`super::exp_neg`] of 4 lanes.
    #[inline(always)]
    pub unsafe fn exp128(x: float32x4_t) -> float32x4_t {
        let ok = vcgeq_f32(x, vdupq_n_f32(MIN_X));
        let t = vaddq_f32(vmulq_f32(x, vdupq_n_f32(LOG2E)), vdupq_n_f32(MAGIC));
        let n = vsubq_f32(t, vdupq_n_f32(MAGIC));
        let r = vfmaq_f32(x, n, vdupq_n_f32(-LN2_HI));
        let r = vfmaq_f32(r, n, vdupq_n_f32(-LN2_LO));
        let mut p = vdupq_n_f32(C[7]);
        for k in (0..7).rev() {
            p = vfmaq_f32(vdupq_n_f32(C[k]), p, r);
        }
        let e = vshlq_n_s32::<23>(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)));
        let y = vmulq_f32(p, vreinterpretq_f32_s32(e));
        vreinterpretq_f32_u32(vandq_u32(ok, vreinterpretq_u32_f32(y)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_neg_is_close_to_exp() {
        let mut x = 0f32;
        while x > -90.0 {
            let (a, b) = (exp_neg(x), x.exp());
            assert!(
                (a - b).abs() <= 4.0 * f32::EPSILON * b || x < -87.0,
                "{x}: {a} vs {b}"
            );
            x -= 0.0137;
        }
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_neg(f32::NAN), 0.0);
    }

    /// Inputs over the whole range, the edges and the special values (a multiple of 16 of
    /// them), with the scalar code's bits.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn inputs() -> (Vec<f32>, Vec<u32>) {
        let mut xs: Vec<f32> = (0..20_000).map(|i| -(i as f32) * 0.00457).collect();
        xs.extend([
            0.0,
            -0.0,
            -87.0,
            -87.000_01,
            -86.999_99,
            f32::NEG_INFINITY,
            f32::NAN,
            -1e-30,
        ]);
        while !xs.len().is_multiple_of(16) {
            xs.push(-1.0);
        }
        let want: Vec<u32> = xs.iter().map(|&x| exp_neg(x).to_bits()).collect();
        (xs, want)
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_matches_the_scalar_code_bitwise() {
        use std::arch::aarch64::*;
        let (xs, want) = inputs();
        for (x, w) in xs.chunks_exact(4).zip(want.chunks_exact(4)) {
            let mut got = [0f32; 4];
            // SAFETY: NEON is part of aarch64; both slices hold 4 values.
            unsafe { vst1q_f32(got.as_mut_ptr(), neon::exp128(vld1q_f32(x.as_ptr()))) };
            assert_eq!(got.map(f32::to_bits), w, "neon {x:?}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vectors_match_the_scalar_code_bitwise() {
        use std::arch::x86_64::*;
        let (xs, want) = inputs();
        if is_x86_feature_detected!("avx512f") {
            #[target_feature(enable = "avx512f")]
            unsafe fn run(x: &[f32], got: &mut [f32]) {
                _mm512_storeu_ps(got.as_mut_ptr(), x86::exp512(_mm512_loadu_ps(x.as_ptr())));
            }
            for (x, w) in xs.chunks_exact(16).zip(want.chunks_exact(16)) {
                let mut got = [0f32; 16];
                // SAFETY: AVX-512F is present (checked above); both slices hold 16 values.
                unsafe { run(x, &mut got) };
                assert_eq!(got.map(f32::to_bits), w, "avx512 {x:?}");
            }
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            #[target_feature(enable = "avx2,fma")]
            unsafe fn run(x: &[f32], got: &mut [f32]) {
                _mm256_storeu_ps(got.as_mut_ptr(), x86::exp256(_mm256_loadu_ps(x.as_ptr())));
            }
            for (x, w) in xs.chunks_exact(8).zip(want.chunks_exact(8)) {
                let mut got = [0f32; 8];
                // SAFETY: AVX2 and FMA are present (checked above); both slices hold 8 values.
                unsafe { run(x, &mut got) };
                assert_eq!(got.map(f32::to_bits), w, "avx2 {x:?}");
            }
        }
    }
}
