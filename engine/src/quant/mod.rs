//! Tensor element types and their block formats: layouts, dequantization, llama.cpp's reference
//! quantizers, and the scalar reference dot products the matmul kernels are checked against.
//!
//! - [`dequantize_row`]: any supported type to f32.
//! - [`quantize_row`]: f32 to a type, giving the same bytes as llama.cpp's reference quantizer for
//!   that type (what `llama-quantize` writes without an importance matrix).
//! - [`vec_dot_type`] / [`vec_dot`]: how llama.cpp's CPU backend multiplies a weight row with an
//!   activation row: the activations are first quantized to `vec_dot_type(weight type)` (with
//!   [`quantize_activations`]), then each block contributes an exact integer dot product scaled by
//!   the block scales. [`vec_dot`] is the clear, exact, scalar statement of that arithmetic; SIMD
//!   kernels must agree with it to float rounding.
//!
//! Block layouts are in [`blocks`]; each family of formats (`float`, `legacy`, `kquants`, `iq4`) has
//! its own module with its dequantizer, quantizer and dot product side by side; `search` holds the
//! scale searches of the K-quant and IQ4 quantizers.

pub mod blocks;
mod file;
mod float;
mod ftype;
mod iq4;
mod kquants;
mod legacy;
pub mod mix;
mod search;
mod types;
pub use file::{quantize_file, QuantizeOptions, QuantizeProgress, QuantizeReport, QUANTIZATION_VERSION};
pub use ftype::FileType;
pub use types::GgmlType;

use blocks::*;
use bytemuck::Pod;

use crate::{Error, Result};

/// Whether [`dequantize_row`] handles `ty`.
pub fn can_dequantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q8_1
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
            | IQ4_NL
            | IQ4_XS
    )
}

/// Whether [`quantize_row`] can produce `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    can_dequantize(ty)
}

fn unsupported(ty: GgmlType) -> Error {
    Error::UnsupportedType {
        tensor: String::new(),
        ty: ty.name().to_string(),
    }
}

/// Checks that `n` elements of `ty` take exactly `bytes` bytes.
fn check_len(ty: GgmlType, n: usize, bytes: usize) -> Result<()> {
    match ty.row_bytes(n as u64) {
        Some(want) if want == bytes as u64 => Ok(()),
        Some(want) => Err(Error::BadTensor {
            tensor: String::new(),
            msg: format!("{n} {} elements take {want} bytes, got {bytes}", ty.name()),
        }),
        None => Err(Error::BadTensor {
            tensor: String::new(),
            msg: format!(
                "{n} elements is not a whole number of {}-element {} blocks",
                ty.block_size(),
                ty.name()
            ),
        }),
    }
}

/// Views bytes as blocks. Blocks are byte arrays (alignment 1), so this only fails on a length
/// that is not a whole number of blocks, which the callers have already ruled out.
fn cast<B: Pod>(bytes: &[u8]) -> &[B] {
    bytemuck::cast_slice(bytes)
}

fn cast_mut<B: Pod>(bytes: &mut [u8]) -> &mut [B] {
    bytemuck::cast_slice_mut(bytes)
}

/// Dequantizes `dst.len()` consecutive elements of type `ty` (a row, or several rows) from `src`,
/// which must hold exactly their bytes.
///
/// Unsupported types give [`Error::UnsupportedType`] and wrong lengths [`Error::BadTensor`], both
/// with an empty tensor name that the caller fills in ([`Error::for_tensor`]).
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    if !can_dequantize(ty) {
        return Err(unsupported(ty));
    }
    check_len(ty, dst.len(), src.len())?;
    use GgmlType::*;
    match ty {
        F32 => float::dequantize_f32(src, dst),
        F16 => float::dequantize_f16(src, dst),
        BF16 => float::dequantize_bf16(src, dst),
        Q4_0 => legacy::dequantize_q4_0(cast(src), dst),
        Q4_1 => legacy::dequantize_q4_1(cast(src), dst),
        Q5_0 => legacy::dequantize_q5_0(cast(src), dst),
        Q5_1 => legacy::dequantize_q5_1(cast(src), dst),
        Q8_0 => legacy::dequantize_q8_0(cast(src), dst),
        Q8_1 => legacy::dequantize_q8_1(cast(src), dst),
        Q2_K => kquants::dequantize_q2_k(cast(src), dst),
        Q3_K => kquants::dequantize_q3_k(cast(src), dst),
        Q4_K => kquants::dequantize_q4_k(cast(src), dst),
        Q5_K => kquants::dequantize_q5_k(cast(src), dst),
        Q6_K => kquants::dequantize_q6_k(cast(src), dst),
        Q8_K => kquants::dequantize_q8_k(cast(src), dst),
        IQ4_NL => iq4::dequantize_iq4_nl(cast(src), dst),
        IQ4_XS => iq4::dequantize_iq4_xs(cast(src), dst),
        _ => unreachable!("checked by can_dequantize"),
    }
    Ok(())
}

/// Quantizes `src` (whole blocks of `ty`) into `dst`, which must be exactly their size, with
/// llama.cpp's reference quantizer for `ty` (no importance matrix): the bytes `llama-quantize`
/// writes. Blocks are independent, so a row can be quantized in pieces of whole blocks.
///
/// For IQ4_NL this is `quantize_iq4_nl` (7 refinement steps, what model files use), not the
/// unrefined `quantize_row_iq4_nl_ref`.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    if !can_quantize(ty) {
        return Err(unsupported(ty));
    }
    check_len(ty, src.len(), dst.len())?;
    use GgmlType::*;
    match ty {
        F32 => float::quantize_f32(src, dst),
        F16 => float::quantize_f16(src, dst),
        BF16 => float::quantize_bf16(src, dst),
        Q4_0 => legacy::quantize_q4_0(src, cast_mut(dst)),
        Q4_1 => legacy::quantize_q4_1(src, cast_mut(dst)),
        Q5_0 => legacy::quantize_q5_0(src, cast_mut(dst)),
        Q5_1 => legacy::quantize_q5_1(src, cast_mut(dst)),
        Q8_0 => legacy::quantize_q8_0(src, cast_mut(dst)),
        Q8_1 => legacy::quantize_q8_1(src, cast_mut(dst)),
        Q2_K => kquants::quantize_q2_k(src, cast_mut(dst)),
        Q3_K => kquants::quantize_q3_k(src, cast_mut(dst)),
        Q4_K => kquants::quantize_q4_k(src, cast_mut(dst)),
        Q5_K => kquants::quantize_q5_k(src, cast_mut(dst)),
        Q6_K => kquants::quantize_q6_k(src, cast_mut(dst)),
        Q8_K => kquants::quantize_q8_k(src, cast_mut(dst)),
        IQ4_NL => iq4::quantize_iq4_nl(src, cast_mut(dst)),
        IQ4_XS => iq4::quantize_iq4_xs(src, cast_mut(dst)),
        _ => unreachable!("checked by can_quantize"),
    }
    Ok(())
}

/// Whether quantized data is usable (ggml's `ggml_validate_row_data`): every value of a float
/// format and every block scale of a quantized one is finite. `false` also for a length that is
/// not a whole number of blocks, or a type this module does not know.
pub fn validate_row_data(ty: GgmlType, data: &[u8]) -> bool {
    if !(data.len() as u64).is_multiple_of(ty.type_size()) {
        return false;
    }
    fn all<B: Pod>(data: &[u8], ok: impl Fn(&B) -> bool) -> bool {
        cast::<B>(data).iter().all(ok)
    }
    use GgmlType::*;
    match ty {
        F32 => data.chunks_exact(4).all(|b| float::f32_at(b).is_finite()),
        F16 => data.chunks_exact(2).all(|b| float::f16_at(b).is_finite()),
        BF16 => data.chunks_exact(2).all(|b| float::bf16_at(b).is_finite()),
        Q4_0 => all(data, |b: &BlockQ4_0| b.d().is_finite()),
        Q4_1 => all(data, |b: &BlockQ4_1| b.d().is_finite() && b.m().is_finite()),
        Q5_0 => all(data, |b: &BlockQ5_0| b.d().is_finite()),
        Q5_1 => all(data, |b: &BlockQ5_1| b.d().is_finite() && b.m().is_finite()),
        Q8_0 => all(data, |b: &BlockQ8_0| b.d().is_finite()),
        Q8_1 => all(data, |b: &BlockQ8_1| b.d().is_finite() && b.s().is_finite()),
        Q2_K => all(data, |b: &BlockQ2_K| b.d().is_finite() && b.dmin().is_finite()),
        Q3_K => all(data, |b: &BlockQ3_K| b.d().is_finite()),
        Q4_K => all(data, |b: &BlockQ4_K| b.d().is_finite() && b.dmin().is_finite()),
        Q5_K => all(data, |b: &BlockQ5_K| b.d().is_finite() && b.dmin().is_finite()),
        Q6_K => all(data, |b: &BlockQ6_K| b.d().is_finite()),
        Q8_K => all(data, |b: &BlockQ8_K| b.d().is_finite()),
        IQ4_NL => all(data, |b: &BlockIQ4_NL| b.d().is_finite()),
        IQ4_XS => all(data, |b: &BlockIQ4_XS| b.d().is_finite()),
        _ => false,
    }
}

/// Quantizes activations for [`vec_dot`] the way llama.cpp's CPU backend does on x86 and ARM
/// (`type_traits_cpu[ty].from_float`). This equals [`quantize_row`] except for Q8_0 and Q8_1, whose
/// SIMD quantizers multiply by `127 / absmax` and round halves to even (the reference divides by
/// `absmax / 127` and rounds halves away from zero), so a rare quant differs by one.
pub fn quantize_activations(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    match ty {
        GgmlType::Q8_0 | GgmlType::Q8_1 => {
            check_len(ty, src.len(), dst.len())?;
            if ty == GgmlType::Q8_0 {
                legacy::quantize_q8_0_simd_rounding(src, cast_mut(dst));
            } else {
                legacy::quantize_q8_1_simd_rounding(src, cast_mut(dst));
            }
            Ok(())
        }
        _ => quantize_row(ty, src, dst),
    }
}

/// The activation format llama.cpp's CPU backend pairs with weights of type `ty`
/// (`type_traits_cpu[ty].vec_dot_type` in `ggml-cpu.c`): Q8_0 for Q4_0, Q5_0, Q8_0, IQ4_NL (and
/// MXFP4, NVFP4, Q1_0, Q2_0); Q8_1 for Q4_1, Q5_1 (and Q8_1); Q8_K for the K-quants, all IQ2/IQ3/IQ1
/// types, IQ4_XS and the ternary types; F16 for F16 and BF16 for BF16. Everything else (F32, the
/// integer types, Q8_K itself) pairs with F32.
pub fn vec_dot_type(ty: GgmlType) -> GgmlType {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | MXFP4 | NVFP4 | Q1_0 | Q2_0 => Q8_0,
        Q4_1 | Q5_1 | Q8_1 => Q8_1,
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M
        | IQ4_XS | TQ1_0 | TQ2_0 => Q8_K,
        F16 => F16,
        BF16 => BF16,
        _ => F32,
    }
}

/// Whether [`vec_dot`] handles weights of type `ty`.
pub fn can_vec_dot(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | IQ4_NL
            | IQ4_XS
    )
}

/// The scalar reference dot product of one weight row of type `ty` (`n` elements, `weights` its
/// exact bytes) with one activation row already quantized to [`vec_dot_type`]`(ty)`.
///
/// It computes what llama.cpp's `ggml_vec_dot_<ty>_<vec_dot_type>` computes: for each block the
/// exact integer dot product of the quants (offsets, scales of sub-blocks and the K-quant mins
/// folded in as integers, the mins through the Q8_K `bsums`, Q4_1/Q5_1 minimums through the Q8_1
/// `s`), then one f32 scaling by `d_weight * d_activation` per block, blocks summed in order in
/// f32. F32/F16/BF16 rows multiply in f32 and sum in f64 (ggml's scalar path). SIMD kernels sum in
/// a different order and may use FMA, so they agree with this to float rounding, not bit for bit.
///
/// # Panics
/// If `ty` is not a weight type [`can_vec_dot`] accepts, or a slice does not hold exactly the
/// bytes of `n` elements of its type: these are programming errors, the caller has validated the
/// tensor and sized the activation buffer.
pub fn vec_dot(ty: GgmlType, n: usize, weights: &[u8], activations: &[u8]) -> f32 {
    assert!(
        can_vec_dot(ty),
        "vec_dot: no kernel for weight type {}",
        ty.name()
    );
    let act = vec_dot_type(ty);
    assert_eq!(
        ty.row_bytes(n as u64),
        Some(weights.len() as u64),
        "vec_dot: {} weight row of {n}",
        ty.name()
    );
    assert_eq!(
        act.row_bytes(n as u64),
        Some(activations.len() as u64),
        "vec_dot: {} activation row of {n}",
        act.name()
    );
    let (w, a) = (weights, activations);
    use GgmlType::*;
    match ty {
        F32 => float::dot_float(w, a, 4, float::f32_at),
        F16 => float::dot_float(w, a, 2, float::f16_at),
        BF16 => float::dot_float(w, a, 2, float::bf16_at),
        Q4_0 => legacy::dot_q4_0_q8_0(cast(w), cast(a)),
        Q4_1 => legacy::dot_q4_1_q8_1(cast(w), cast(a)),
        Q5_0 => legacy::dot_q5_0_q8_0(cast(w), cast(a)),
        Q5_1 => legacy::dot_q5_1_q8_1(cast(w), cast(a)),
        Q8_0 => legacy::dot_q8_0_q8_0(cast(w), cast(a)),
        Q2_K => kquants::dot_q2_k_q8_k(cast(w), cast(a)),
        Q3_K => kquants::dot_q3_k_q8_k(cast(w), cast(a)),
        Q4_K => kquants::dot_q4_k_q8_k(cast(w), cast(a)),
        Q5_K => kquants::dot_q5_k_q8_k(cast(w), cast(a)),
        Q6_K => kquants::dot_q6_k_q8_k(cast(w), cast(a)),
        IQ4_NL => iq4::dot_iq4_nl_q8_0(cast(w), cast(a)),
        IQ4_XS => iq4::dot_iq4_xs_q8_k(cast(w), cast(a)),
        _ => unreachable!("checked by can_vec_dot"),
    }
}

#[cfg(test)]
mod tests;
