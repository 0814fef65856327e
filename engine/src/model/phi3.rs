//! `phi3`: Phi-3/3.5 (and Phi-4-mini). Fused `attn_qkv` and `ffn_up` (gate first), NeoX RoPE with
//! LongRoPE factors (`rope_factors_long/short`) when present, Q pre-scaled by `1/sqrt(head_dim)`.
//! The sliding window in the metadata is ignored, as llama.cpp does.

use super::arch::{Arch, Ffn, QScale};
use super::hparams::HParams;
use crate::gguf::Metadata;
use crate::ops::rope::RopeStyle;
use crate::Result;

pub const ARCH: Arch = Arch {
    name: "phi3",
    rope: RopeStyle::Neox,
    fused_qkv: true,
    ffn: Ffn::SiluFusedUp,
    q_scale: QScale::PreScaleQ,
    hparams: Some(hparams),
    ..Arch::BASE
};

fn hparams(h: &mut HParams, _: &Metadata) -> Result<()> {
    h.n_swa = None;
    h.swa_layers.fill(false);
    h.attention_scale = 1.0 / (h.head_dim_k as f32).sqrt();
    Ok(())
}
