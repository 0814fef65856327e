//! Row formats of the matmul and the KV cache, over the engine's compute kernels.
//!
//! Dot products and the conversion of activations to each weight type's `vec_dot_type` come from
//! [`crate::kernels`] (SIMD chosen at run time, identical integer sums to the scalar reference).
//! Dequantization (token embedding rows, small vectors, KV rows) is [`crate::quant`]'s, with a fast
//! path for the F16 KV cache.

use std::sync::OnceLock;

use half::f16;

use crate::kernels::{self, Isa};
use crate::quant::GgmlType;

/// f16 -> f32 through a table (as ggml does on CPUs without F16C), faster than converting bits.
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    static TABLE: OnceLock<Vec<f32>> = OnceLock::new();
    let t = TABLE.get_or_init(|| (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).collect());
    t[bits as usize]
}

fn isa() -> Isa {
    Isa::active()
}

/// The format activations are converted to before being dotted with rows of type `ty`.
pub fn vec_dot_type(ty: GgmlType) -> GgmlType {
    kernels::vec_dot_type(ty)
}

/// Whether matrices of type `ty` can be multiplied.
pub fn can_multiply(ty: GgmlType) -> bool {
    kernels::has_kernel(ty)
}

/// Whether rows of type `ty` can be converted to f32.
pub fn can_dequantize(ty: GgmlType) -> bool {
    crate::quant::can_dequantize(ty)
}

/// Converts one row of f32 values to an activation (or KV cache) format, as llama.cpp's CPU
/// backend does (`from_float`). For Q8_0/Q8_1 that is its SIMD quantizer (`127 / max`, halves to
/// even), not the reference one: the two differ in a rare quant, which is enough to move a logit
/// of a real model by a few hundredths, so we round as the reference logits were computed. The
/// kernels of every tier give those same bytes.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    kernels::quantize_act(isa(), ty, src, dst)
}

/// Converts one row of type `ty` to f32.
///
/// # Panics
/// If `ty` cannot be dequantized or the sizes do not match (checked at load).
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    if ty == GgmlType::F16 {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = f16_to_f32(u16::from_le_bytes([s[0], s[1]]));
        }
        return;
    }
    crate::quant::dequantize_row(ty, src, dst)
        .unwrap_or_else(|e| panic!("dequantize_row: {e} (checked at load)"));
}
