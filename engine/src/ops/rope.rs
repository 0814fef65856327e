//! Rotary position embeddings (RoPE), as ggml's `rope_ext`: adjacent pairs (`Norm`) or the two
//! halves of the rotated dimensions (`Neox`), linear frequency scaling, per-dimension frequency
//! factors (Llama 3 scaling, LongRoPE) and YaRN.
//!
//! The angles follow ggml's `ggml_rope_cache_init`: `theta` starts at the position and is multiplied
//! by `base^(-2/n_rot)` per pair, in f32, rather than computing a power per dimension.

use std::f32::consts::PI;
use std::sync::Arc;

/// Which dimensions are rotated together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(x[2i], x[2i+1])` (llama: its converter permutes Q/K rows to this layout).
    Norm,
    /// Pairs `(x[i], x[i + n_rot/2])` (GPT-NeoX layout: qwen, gemma, phi3).
    Neox,
}

/// Everything that decides the rotation of one layer's Q and K.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    pub style: RopeStyle,
    /// Number of rotated dimensions at the start of each head (the rest pass through).
    pub n_rot: usize,
    pub freq_base: f32,
    /// `1 / scaling factor` (linear / YaRN interpolation); 1 for none.
    pub freq_scale: f32,
    /// YaRN extrapolation mix; 0 unless the scaling type is YaRN.
    pub ext_factor: f32,
    /// Magnitude factor multiplied into cos and sin (YaRN / LongRoPE attention factor).
    pub attn_factor: f32,
    /// YaRN correction range (in dimension pairs).
    pub corr_dims: [f32; 2],
    /// Per-pair divisors of theta (`rope_freqs`, `rope_factors_long/short`), `n_rot / 2` values.
    pub freq_factors: Option<Arc<[f32]>>,
}

impl Rope {
    /// A plain rotation with no scaling.
    pub fn new(style: RopeStyle, n_rot: usize, freq_base: f32) -> Rope {
        Rope {
            style,
            n_rot,
            freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            corr_dims: [0.0, 0.0],
            freq_factors: None,
        }
    }

    /// Sets up YaRN's correction dimensions (`ggml_rope_yarn_corr_dims`).
    pub fn with_yarn(mut self, n_ctx_orig: u32, beta_fast: f32, beta_slow: f32) -> Rope {
        let dim = |n_rot_beta: f32| {
            self.n_rot as f32 * (n_ctx_orig as f32 / (n_rot_beta * 2.0 * PI)).ln()
                / (2.0 * self.freq_base.ln())
        };
        let start = dim(beta_fast).floor();
        let end = dim(beta_slow).ceil();
        self.corr_dims = [start.max(0.0), end.min(self.n_rot as f32 - 1.0)];
        self
    }

    /// The (cos, sin) pairs for position `pos`: `n_rot` values, cos at even and sin at odd indices.
    pub fn cos_sin(&self, pos: f32, out: &mut [f32]) {
        assert_eq!(out.len(), self.n_rot);
        let theta_scale = self.freq_base.powf(-2.0 / self.n_rot as f32);
        let mut theta = pos;
        for i0 in (0..self.n_rot).step_by(2) {
            let ff = self.freq_factors.as_ref().map_or(1.0, |f| f[i0 / 2]);
            let (c, s) = self.yarn(theta / ff, i0);
            out[i0] = c;
            out[i0 + 1] = s;
            theta *= theta_scale;
        }
    }

    /// ggml's `rope_yarn`.
    fn yarn(&self, theta_extrap: f32, i0: usize) -> (f32, f32) {
        let theta_interp = self.freq_scale * theta_extrap;
        let mut theta = theta_interp;
        let mut mscale = self.attn_factor;
        if self.ext_factor != 0.0 {
            let [low, high] = self.corr_dims;
            let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
            let ramp_mix = (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor;
            theta = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
            mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale).ln();
        }
        (theta.cos() * mscale, theta.sin() * mscale)
    }

    /// Rotates each of the heads (rows of `head_dim`) in `x` by the angles in `cs` (from
    /// [`Rope::cos_sin`]).
    pub fn apply(&self, x: &mut [f32], head_dim: usize, cs: &[f32]) {
        let n = self.n_rot;
        assert!(n <= head_dim && n.is_multiple_of(2) && x.len().is_multiple_of(head_dim) && cs.len() == n);
        for head in x.chunks_exact_mut(head_dim) {
            for i0 in (0..n).step_by(2) {
                let (c, s) = (cs[i0], cs[i0 + 1]);
                let (a, b) = match self.style {
                    RopeStyle::Norm => (i0, i0 + 1),
                    RopeStyle::Neox => (i0 / 2, i0 / 2 + n / 2),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * c - x1 * s;
                head[b] = x0 * s + x1 * c;
            }
        }
    }

    /// The same rotation without the magnitude factor: what turns keys at `p` into keys at
    /// `p + delta` (a K-shift), since rotations compose and the factor is already in the keys.
    pub fn for_shift(&self) -> Rope {
        let yarn_mscale = if self.ext_factor != 0.0 {
            1.0 + 0.1 * (1.0 / self.freq_scale).ln()
        } else {
            1.0
        };
        Rope {
            attn_factor: 1.0 / yarn_mscale,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rotate(rope: &Rope, x: &mut [f32], head_dim: usize, pos: f32) {
        let mut cs = vec![0f32; rope.n_rot];
        rope.cos_sin(pos, &mut cs);
        rope.apply(x, head_dim, &cs);
    }

    #[test]
    fn position_zero_is_identity_and_norm_is_kept() {
        for style in [RopeStyle::Norm, RopeStyle::Neox] {
            let rope = Rope::new(style, 8, 10000.0);
            let x0: Vec<f32> = (0..16).map(|i| i as f32 * 0.3 - 2.0).collect();
            let mut x = x0.clone();
            rotate(&rope, &mut x, 16, 0.0);
            assert_eq!(x, x0);
            rotate(&rope, &mut x, 16, 37.0);
            let n0: f32 = x0.iter().map(|v| v * v).sum();
            let n1: f32 = x.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
            assert_eq!(x[8..], x0[8..], "dimensions past n_rot pass through");
        }
    }

    #[test]
    fn rotations_compose() {
        // A K-shift relies on rotate(p + d) == rotate(d) after rotate(p).
        let rope = Rope::new(RopeStyle::Neox, 16, 1e6);
        let x0: Vec<f32> = (0..16).map(|i| (i as f32).sin()).collect();
        let mut a = x0.clone();
        rotate(&rope, &mut a, 16, 50.0);
        let mut b = x0.clone();
        rotate(&rope, &mut b, 16, 20.0);
        rotate(&rope.for_shift(), &mut b, 16, 30.0);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-4, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn norm_style_rotates_adjacent_pairs() {
        let rope = Rope::new(RopeStyle::Norm, 2, 10000.0);
        let mut x = [1.0f32, 0.0];
        rotate(&rope, &mut x, 2, 1.0);
        assert!((x[0] - 1f32.cos()).abs() < 1e-6 && (x[1] - 1f32.sin()).abs() < 1e-6);
    }
}
