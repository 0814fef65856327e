//! Compute kernels: activation quantization and dot products of weight rows in their file formats,
//! with SIMD variants chosen at run time.
//!
//! Every weight type has a *vec_dot type* (ggml's pairing): activations are converted once per
//! input to that format (Q8_0, Q8_1, Q8_K, F16, BF16 or F32) and then dotted with every weight row
//! using integer products per block. Kernels exist for several instruction-set tiers ([`Isa`]);
//! the best one the CPU supports is picked once, and `OLLAMARS_ISA=scalar|avx2|avxvnni|avx512|amx|neon`
//! forces a lower tier (tests run every tier the CPU allows through the explicit-`Isa` entry
//! points). A binary built for generic x86-64 uses AVX2 / AVX-512 wherever the CPU has them.
//!
//! The `Scalar` tier is `crate::quant`'s reference arithmetic itself. Invariants: every tier
//! computes the same integer sums per block as that reference and differs from it only in the
//! order of f32 additions; activation quantization is bit-identical to
//! [`crate::quant::quantize_activations`] (llama.cpp's SIMD rounding) on every tier.

// Kernels index several parallel arrays (rows x accumulators x scales) with one loop variable.
#![allow(clippy::needless_range_loop)]

pub mod act;
pub mod attn;
mod blocks;
pub mod exp;
pub mod gemm;
pub mod matmul;
pub mod packed;

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
pub(crate) mod tests;

use std::fmt;
use std::sync::OnceLock;

use crate::quant::{self, GgmlType};

/// An instruction-set tier with its own kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust, any CPU: `crate::quant`'s reference arithmetic.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C (Haswell, Zen 1 and later).
    Avx2,
    /// AVX2 plus AVX-VNNI (Alder Lake and later cores without AVX-512): the AVX2 kernels, with
    /// the packed matrices' integer dot products in 256-bit `vpdpbusd`.
    AvxVnni,
    /// x86-64 with AVX-512 F/BW/VL/DQ and VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later);
    /// BF16 dot products are used where AVX512_BF16 is present too.
    Avx512,
    /// AVX-512 plus AMX-INT8 tiles (Sapphire Rapids and later Xeons): the AVX-512 kernels, with
    /// packed Q6_K matrices' batches (prompts) on the tiles. Their sums are llama.cpp's exact
    /// integers per super-block, scaled by the row's scale and then the token's, the AVX-512
    /// tier's order: with the two scales multiplied together first (llama.cpp's order), Gemma 3
    /// 270M's fixture perplexity moved from +0.49% (AVX-512 tier) to +1.04% from llama.cpp's,
    /// and to +0.63% in this order; the other tiers give +0.40% to +0.79% (BENCHMARKS.md).
    Amx,
    /// aarch64 with the dot-product extension (Armv8.2+: Graviton 2+, Apple M1+, Cortex-A76+).
    Neon,
}

impl Isa {
    pub const ALL: [Isa; 6] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512,
        Isa::Amx,
        Isa::Neon,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512 => "avx512",
            Isa::Amx => "amx",
            Isa::Neon => "neon",
        }
    }

    pub fn from_name(s: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether this CPU can run the tier's kernels.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => Isa::Avx2.is_supported() && is_x86_feature_detected!("avxvnni"),
            #[cfg(target_arch = "x86_64")]
            Isa::Amx => {
                Isa::Avx512.is_supported() && is_x86_feature_detected!("avx512vbmi") && x86::amx::available()
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512dq")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("dotprod"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every tier this CPU supports, lowest first.
    pub fn supported() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
    }

    /// The best tier this CPU supports.
    pub fn best() -> Isa {
        *Isa::supported().last().expect("scalar is always supported")
    }

    /// The tier the engine uses: the best one, or the one `OLLAMARS_ISA` names if the CPU
    /// supports it. Decided once per process.
    pub fn active() -> Isa {
        static ACTIVE: OnceLock<Isa> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let best = Isa::best();
            match std::env::var("OLLAMARS_ISA") {
                Ok(v) if !v.is_empty() => match Isa::from_name(&v) {
                    Some(isa) if isa.is_supported() => isa,
                    _ => {
                        eprintln!(
                            "ollamars: OLLAMARS_ISA={v:?} is not a tier this CPU supports; using {best}"
                        );
                        best
                    }
                },
                _ => best,
            }
        })
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx512bf16() -> bool {
    static BF16: OnceLock<bool> = OnceLock::new();
    *BF16.get_or_init(|| is_x86_feature_detected!("avx512bf16"))
}

/// Whether weights of type `ty` have kernels: the types `crate::quant`'s reference dot product
/// (the scalar tier) handles, which every SIMD tier covers too.
pub fn has_kernel(ty: GgmlType) -> bool {
    crate::quant::can_vec_dot(ty)
}

/// The format activations are converted to before being dotted with weights of type `ty`
/// (ggml's `vec_dot_type`).
pub fn vec_dot_type(ty: GgmlType) -> GgmlType {
    quant::vec_dot_type(ty)
}

/// Bytes of a row of `n` values of `ty`; panics unless `n` is a whole number of blocks.
fn row_bytes(ty: GgmlType, n: usize) -> usize {
    ty.row_bytes(n as u64)
        .unwrap_or_else(|| panic!("{n} values are not a whole number of {ty} blocks")) as usize
}

/// Converts `x` to the activation format `ty` (Q8_0, Q8_1, Q8_K, F16, BF16 or F32), with the
/// kernels of `isa`. The bytes are identical for every tier.
pub fn quantize_act(isa: Isa, ty: GgmlType, x: &[f32], out: &mut [u8]) {
    assert_eq!(out.len(), row_bytes(ty, x.len()), "quantize_act: output size");
    assert!(isa.is_supported(), "{isa} kernels on a CPU without them");
    use GgmlType::*;
    match (isa, ty) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 | Isa::Amx, Q8_0 | Q8_1 | Q8_K | F16) => {
            // SAFETY: the tier is supported (asserted above) and the sizes match.
            unsafe {
                match ty {
                    Q8_0 => x86::quantize_q8_0(x, out),
                    Q8_1 => x86::quantize_q8_1(x, out),
                    Q8_K if matches!(isa, Isa::Avx512 | Isa::Amx) => x86::quantize_q8_k_avx512(x, out),
                    Q8_K => x86::quantize_q8_k(x, out),
                    _ => x86::quantize_f16(x, out),
                }
            }
        }
        #[cfg(target_arch = "aarch64")]
        (Isa::Neon, Q8_0 | Q8_1 | Q8_K) => {
            // SAFETY: the tier is supported (asserted above) and the sizes match.
            unsafe {
                match ty {
                    Q8_0 => neon::quantize_q8_0(x, out),
                    Q8_1 => neon::quantize_q8_1(x, out),
                    _ => neon::quantize_q8_k(x, out),
                }
            }
        }
        (_, Q8_0 | Q8_1 | Q8_K | F16 | BF16 | F32) => {
            quant::quantize_activations(ty, x, out).expect("sizes checked above");
        }
        _ => panic!("{ty} is not an activation format"),
    }
}

/// `out[r] = w_r · a` for `out.len()` weight rows of `n` values of type `ty`, row `r` starting at
/// byte `r * w_stride` of `w`, and one activation row `a` in `vec_dot_type(ty)`.
pub fn dot_rows(isa: Isa, ty: GgmlType, n: usize, w: &[u8], w_stride: usize, a: &[u8], out: &mut [f32]) {
    assert!(has_kernel(ty), "no kernel for {ty}");
    assert!(isa.is_supported(), "{isa} kernels on a CPU without them");
    let wrb = row_bytes(ty, n);
    assert!(
        a.len() >= row_bytes(vec_dot_type(ty), n),
        "dot_rows: activation row too short"
    );
    let nr = out.len();
    if nr == 0 {
        return;
    }
    assert!(w_stride >= wrb || nr == 1, "dot_rows: rows overlap");
    assert!(
        w.len() >= (nr - 1) * w_stride + wrb,
        "dot_rows: weights too short"
    );
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    // SAFETY (all arms): the tier is supported, and every row read (nr rows of `wrb` bytes at
    // `w_stride`) and the activation row lie within the slices, as asserted above.
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx if has_avx512bf16() => unsafe {
            x86::dot_rows_avx512bf16(ty, n, wp, w_stride, ap, out)
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe { x86::dot_rows_avx512(ty, n, wp, w_stride, ap, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe { x86::dot_rows_avx2(ty, n, wp, w_stride, ap, out) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::dot_rows(ty, n, wp, w_stride, ap, out) },
        _ => {
            let a = &a[..row_bytes(vec_dot_type(ty), n)];
            for (r, o) in out.iter_mut().enumerate() {
                *o = quant::vec_dot(ty, n, &w[r * w_stride..r * w_stride + wrb], a);
            }
        }
    }
}

/// The dot product of one weight row of type `ty` with one activation row in `vec_dot_type(ty)`.
pub fn vec_dot(isa: Isa, ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut out = [0f32];
    dot_rows(isa, ty, n, w, row_bytes(ty, n), a, &mut out);
    out[0]
}
