//! Activation functions of the feed-forward networks, with ggml's numerics: SiLU in f32 with a
//! polynomial exponential (as ggml's SIMD SiLU), and GELU
//! (tanh approximation) looked up in a table indexed by the input rounded to f16, as ggml does.

use std::sync::OnceLock;

use half::f16;

use crate::kernels::act::GELU_TABLE_LEN;
use crate::kernels::{self, Isa};

/// `gate[i] = silu(gate[i]) * up[i]` (llama.cpp's `swiglu`).
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    kernels::act::swiglu(Isa::active(), gate, up);
}

/// `gate[i] = gelu(gate[i]) * up[i]` (llama.cpp's `geglu`, with ggml's f16-table GELU).
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    kernels::act::geglu(Isa::active(), gelu_table(), gate, up);
}

/// SiLU as [`swiglu`] computes it (a polynomial e^x, within a few ulp of libm's).
pub fn silu(x: f32) -> f32 {
    kernels::act::silu(x)
}

/// ggml's `ggml_vec_gelu_f32` with `GGML_GELU_FP16`: exact outside (-10, 10), else the tanh
/// approximation evaluated at `f16(x)` and stored as f16.
pub fn gelu(x: f32) -> f32 {
    kernels::act::gelu(x, gelu_table())
}

fn gelu_table() -> &'static [u16] {
    static TABLE: OnceLock<Vec<u16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..GELU_TABLE_LEN)
            .map(|i| {
                let bits = i as u16; // the padding entry repeats entry 0
                f16::from_f32(gelu_tanh(f16::from_bits(bits).to_f32())).to_bits()
            })
            .collect()
    })
}

fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_match_their_definitions() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(2.0) - 2.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-7);
        for x in [-3.0f32, -0.5, 0.0, 0.7, 2.5, 9.0] {
            assert!((gelu(x) - gelu_tanh(x)).abs() <= 4e-3 * x.abs().max(1.0), "{x}");
        }
        assert_eq!(gelu(-11.0), 0.0);
        assert_eq!(gelu(12.5), 12.5);
        let mut g = [1.0f32, -1.0];
        geglu(&mut g, &[2.0, 3.0]);
        assert_eq!(g[0], gelu(1.0) * 2.0);
        let mut g = [1.0f32];
        swiglu(&mut g, &[3.0]);
        assert_eq!(g[0], silu(1.0) * 3.0);
    }
}
