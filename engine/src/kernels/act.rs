//! The gated activations of the feed-forward networks over a row, with SIMD tiers that give the
//! scalar code's bits.
//!
//! - GELU by ggml's f16 table (`GGML_GELU_FP16`): the input rounded to f16 indexes a table of f16
//!   results, exact (0 or x) outside (-10, 10). The SIMD tiers round with F16C (NEON `fcvtn`),
//!   gather from the table and widen back; they replace a call per value into the `half` crate's conversions (in
//!   Gemma 3 prompts, a few percent of the time).
//! - SiLU from [`exp_neg`] of -|x| (a polynomial, as ggml's own SIMD SiLU is): a libm `expf` call
//!   per value was ~2% of a SiLU model's prompt pass.

#![allow(clippy::missing_safety_doc)]

use half::f16;

use super::exp::exp_neg;
use super::Isa;

/// Entries a GELU table has: one per f16 bit pattern, plus one so that a 32-bit gather at the
/// last index stays inside it.
pub const GELU_TABLE_LEN: usize = 1 << 16 | 1;

/// GELU of `x` by `table` (indexed by the f16 bits of `x`, [`GELU_TABLE_LEN`] entries).
#[inline]
pub fn gelu(x: f32, table: &[u16]) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        f16::from_bits(table[f16::from_f32(x).to_bits() as usize]).to_f32()
    }
}

/// `gate[i] = gelu(gate[i]) * up[i]` with the kernels of `isa` (which the CPU must support).
pub fn geglu(isa: Isa, table: &[u16], gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    assert_eq!(table.len(), GELU_TABLE_LEN);
    assert!(isa.is_supported(), "{isa} kernels on a CPU without them");
    let done = match isa {
        // SAFETY: the tier is supported, the lengths are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe {
            x86::geglu_avx512(table.as_ptr(), gate.as_mut_ptr(), up.as_ptr(), gate.len())
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe {
            x86::geglu_avx2(table.as_ptr(), gate.as_mut_ptr(), up.as_ptr(), gate.len())
        },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::geglu(table.as_ptr(), gate.as_mut_ptr(), up.as_ptr(), gate.len()) },
        _ => 0,
    };
    for (g, u) in gate[done..].iter_mut().zip(&up[done..]) {
        *g = gelu(*g, table) * u;
    }
}

/// SiLU, x·σ(x): `x / (1 + e^-x)` for x >= 0 and `x·e^x / (1 + e^x)` below, so that the
/// exponent is never positive.
#[inline]
pub fn silu(x: f32) -> f32 {
    let t = exp_neg(-x.abs());
    let num = if x >= 0.0 { x } else { x * t };
    num / (1.0 + t)
}

/// `gate[i] = silu(gate[i]) * up[i]` with the kernels of `isa` (which the CPU must support).
pub fn swiglu(isa: Isa, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    assert!(isa.is_supported(), "{isa} kernels on a CPU without them");
    let done = match isa {
        // SAFETY: the tier is supported, the lengths are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe { x86::swiglu_avx512(gate.as_mut_ptr(), up.as_ptr(), gate.len()) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe { x86::swiglu_avx2(gate.as_mut_ptr(), up.as_ptr(), gate.len()) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::swiglu(gate.as_mut_ptr(), up.as_ptr(), gate.len()) },
        _ => 0,
    };
    for (g, u) in gate[done..].iter_mut().zip(&up[done..]) {
        *g = silu(*g) * u;
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;
    use std::arch::asm;

    use crate::kernels::exp::neon::exp128;
    use crate::kernels::neon::f16x4;

    /// Whole vectors of 4; returns how many values it did. The table is read one entry at a
    /// time (NEON has no gather); rounding to f16 (`fcvtn`, to nearest even as the `half`
    /// crate) and widening are vector instructions.
    #[target_feature(enable = "neon")]
    pub unsafe fn geglu(table: *const u16, gate: *mut f32, up: *const f32, n: usize) -> usize {
        let (lo, hi, zero) = (vdupq_n_f32(-10.0), vdupq_n_f32(10.0), vdupq_n_f32(0.0));
        let mut i = 0;
        while i + 4 <= n {
            let x = vld1q_f32(gate.add(i));
            let h: uint16x4_t;
            asm!("fcvtn {0:v}.4h, {1:v}.4s", out(vreg) h, in(vreg) x, options(pure, nomem, nostack, preserves_flags));
            let mut idx = [0u16; 4];
            vst1_u16(idx.as_mut_ptr(), h);
            let e = idx.map(|j| *table.add(usize::from(j)));
            let g = f16x4(e.as_ptr() as *const u8);
            // x >= 10: x; x <= -10: 0 (NaN takes the table, as the scalar code does).
            let g = vbslq_f32(vcgeq_f32(x, hi), x, g);
            let g = vbslq_f32(vcleq_f32(x, lo), zero, g);
            vst1q_f32(gate.add(i), vmulq_f32(g, vld1q_f32(up.add(i))));
            i += 4;
        }
        i
    }

    /// Whole vectors of 4; returns how many values it did.
    #[target_feature(enable = "neon")]
    pub unsafe fn swiglu(gate: *mut f32, up: *const f32, n: usize) -> usize {
        let (zero, one) = (vdupq_n_f32(0.0), vdupq_n_f32(1.0));
        let mut i = 0;
        while i + 4 <= n {
            let x = vld1q_f32(gate.add(i));
            let t = exp128(vnegq_f32(vabsq_f32(x)));
            let num = vbslq_f32(vcgeq_f32(x, zero), x, vmulq_f32(x, t));
            let g = vdivq_f32(num, vaddq_f32(one, t));
            vst1q_f32(gate.add(i), vmulq_f32(g, vld1q_f32(up.add(i))));
            i += 4;
        }
        i
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::kernels::exp::x86::{exp256, exp512};

    const ROUND: i32 = _MM_FROUND_TO_NEAREST_INT;

    /// Whole vectors of 16; returns how many values it did.
    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    pub unsafe fn geglu_avx512(table: *const u16, gate: *mut f32, up: *const f32, n: usize) -> usize {
        let lo = _mm512_set1_ps(-10.0);
        let hi = _mm512_set1_ps(10.0);
        let mut i = 0;
        while i + 16 <= n {
            let x = _mm512_loadu_ps(gate.add(i));
            let idx = _mm512_cvtepu16_epi32(_mm512_cvtps_ph::<ROUND>(x));
            // 32 bits at 2 * idx: the entry in the low half (little-endian).
            let t = _mm512_i32gather_epi32::<2>(idx, table as *const i32);
            let g = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(t));
            // x >= 10: x; x <= -10: 0 (NaN takes the table, as the scalar code does).
            let g = _mm512_mask_mov_ps(g, _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, hi), x);
            let g = _mm512_maskz_mov_ps(!_mm512_cmp_ps_mask::<_CMP_LE_OQ>(x, lo), g);
            _mm512_storeu_ps(gate.add(i), _mm512_mul_ps(g, _mm512_loadu_ps(up.add(i))));
            i += 16;
        }
        i
    }

    /// Whole vectors of 8; returns how many values it did.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn geglu_avx2(table: *const u16, gate: *mut f32, up: *const f32, n: usize) -> usize {
        let lo = _mm256_set1_ps(-10.0);
        let hi = _mm256_set1_ps(10.0);
        let low16 = _mm256_set1_epi32(0xffff);
        let mut i = 0;
        while i + 8 <= n {
            let x = _mm256_loadu_ps(gate.add(i));
            let idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph::<ROUND>(x));
            let t = _mm256_and_si256(_mm256_i32gather_epi32::<2>(table as *const i32, idx), low16);
            // Entries 0-3 | 4-7 as u16 in each 128-bit lane's low half; the two low halves joined.
            let p = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(t, t));
            let g = _mm256_cvtph_ps(_mm256_castsi256_si128(p));
            let g = _mm256_blendv_ps(g, x, _mm256_cmp_ps::<_CMP_GE_OQ>(x, hi));
            let g = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(x, lo), g);
            _mm256_storeu_ps(gate.add(i), _mm256_mul_ps(g, _mm256_loadu_ps(up.add(i))));
            i += 8;
        }
        i
    }

    /// Whole vectors of 16; returns how many values it did.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn swiglu_avx512(gate: *mut f32, up: *const f32, n: usize) -> usize {
        let sign = _mm512_set1_epi32(i32::MIN);
        let (zero, one) = (_mm512_setzero_ps(), _mm512_set1_ps(1.0));
        let mut i = 0;
        while i + 16 <= n {
            let x = _mm512_loadu_ps(gate.add(i));
            let neg_abs = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), sign));
            let t = exp512(neg_abs);
            let num = _mm512_mask_mov_ps(_mm512_mul_ps(x, t), _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, zero), x);
            let g = _mm512_div_ps(num, _mm512_add_ps(one, t));
            _mm512_storeu_ps(gate.add(i), _mm512_mul_ps(g, _mm512_loadu_ps(up.add(i))));
            i += 16;
        }
        i
    }

    /// Whole vectors of 8; returns how many values it did.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn swiglu_avx2(gate: *mut f32, up: *const f32, n: usize) -> usize {
        let sign = _mm256_set1_ps(-0.0);
        let (zero, one) = (_mm256_setzero_ps(), _mm256_set1_ps(1.0));
        let mut i = 0;
        while i + 8 <= n {
            let x = _mm256_loadu_ps(gate.add(i));
            let t = exp256(_mm256_or_ps(x, sign));
            let num = _mm256_blendv_ps(_mm256_mul_ps(x, t), x, _mm256_cmp_ps::<_CMP_GE_OQ>(x, zero));
            let g = _mm256_div_ps(num, _mm256_add_ps(one, t));
            _mm256_storeu_ps(gate.add(i), _mm256_mul_ps(g, _mm256_loadu_ps(up.add(i))));
            i += 8;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table whose entries are not GELU but a mix of the index bits, so that a lane reading the
    /// wrong entry (or the wrong half of a gathered word) cannot go unnoticed.
    fn scrambled_table() -> Vec<u16> {
        (0..GELU_TABLE_LEN as u32)
            .map(|i| {
                let v = (i.wrapping_mul(40503) ^ (i >> 3)) as u16;
                // Keep entries finite so that products compare as numbers.
                if f16::from_bits(v).is_finite() {
                    v
                } else {
                    v & 0xbfff
                }
            })
            .collect()
    }

    #[test]
    fn geglu_tiers_match_the_scalar_code_bitwise() {
        let table = scrambled_table();
        // Every f16 value as an input, the boundaries, values around them, odd lengths.
        let mut xs: Vec<f32> = (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).collect();
        xs.extend([
            -10.0,
            10.0,
            -10.000001,
            9.999999,
            -9.999999,
            1e30,
            -1e30,
            0.0,
            -0.0,
            f32::NAN,
        ]);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..4099 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            xs.push(((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 30.0);
        }
        tiers_match_scalar(&xs, |isa, g, u| geglu(isa, &table, g, u));
    }

    /// `act` on every supported tier gives the scalar tier's bits for `xs` (and its prefixes of
    /// odd lengths), with multipliers that vary per element.
    fn tiers_match_scalar(xs: &[f32], act: impl Fn(Isa, &mut [f32], &[f32])) {
        let up: Vec<f32> = (0..xs.len()).map(|i| 0.25 + (i % 7) as f32 * 0.5).collect();
        let mut want = xs.to_vec();
        act(Isa::Scalar, &mut want, &up);
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
            for len in [xs.len(), 1, 7, 8, 15, 16, 17, 33] {
                let mut got = xs[..len].to_vec();
                act(isa, &mut got, &up[..len]);
                for (i, (a, b)) in got.iter().zip(&want[..len]).enumerate() {
                    assert!(
                        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                        "{isa} len {len}: x {} -> {a} vs {b}",
                        xs[i]
                    );
                }
            }
        }
    }

    #[test]
    fn swiglu_tiers_match_the_scalar_code_bitwise() {
        let mut xs: Vec<f32> = (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).collect();
        xs.extend([
            0.0,
            -0.0,
            87.0,
            -87.0,
            88.0,
            -88.0,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NAN,
        ]);
        tiers_match_scalar(&xs, swiglu);
    }

    #[test]
    fn silu_is_close_to_libm() {
        for b in 0..=u16::MAX {
            let x = f16::from_bits(b).to_f32();
            if !x.is_finite() {
                continue;
            }
            let want = (f64::from(x) / (1.0 + (-f64::from(x)).exp())) as f32;
            let got = silu(x);
            assert!(
                (got - want).abs() <= 4.0 * f32::EPSILON * want.abs()
                    || (want.abs() < 1e-30 && got.abs() < 1e-30),
                "{x}: {got} vs {want}"
            );
        }
        assert_eq!(silu(0.0), 0.0);
        assert!(silu(f32::NAN).is_nan());
    }
}
