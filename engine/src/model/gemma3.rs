//! `gemma3` (text): sliding-window layers (5 local : 1 global unless the metadata says otherwise)
//! with their own RoPE base (10000, unscaled), QK-norm, post-attention and post-FFN norms,
//! embeddings scaled by `sqrt(n_embd)`, GELU-tanh FFN, Q pre-scaled by the query pre-attention
//! scalar, tied output, optional final logit soft-capping. Norm weights in GGUF already include
//! Gemma's `+1`.

use super::arch::{Arch, Ffn, QScale};
use super::hparams::{rope_base, HParams};
use crate::gguf::{Metadata, Value};
use crate::ops::rope::RopeStyle;
use crate::{Error, Result};

pub const ARCH: Arch = Arch {
    name: "gemma3",
    rope: RopeStyle::Neox,
    qk_norm: true,
    post_norms: true,
    scale_embeddings: true,
    ffn: Ffn::GeluGated,
    q_scale: QScale::PreScaleQ,
    hparams: Some(hparams),
    ..Arch::BASE
};

/// Every sixth layer attends globally (llama.cpp's `set_swa_pattern(6)`).
const DEFAULT_PERIOD: usize = 6;

fn hparams(h: &mut HParams, meta: &Metadata) -> Result<()> {
    h.n_swa = Some(
        h.n_swa
            .ok_or_else(|| Error::MissingKey("gemma3.attention.sliding_window".to_string()))?,
    )
    .filter(|&w| w > 0);
    let key = "gemma3.attention.sliding_window_pattern";
    let n_layer = h.n_layer;
    h.swa_layers = match meta.get(key) {
        // Ollama's converter writes one bool per layer (true = sliding window).
        Some(Value::Array(..)) => {
            let v = meta.get_i64_array(key)?.unwrap_or_default();
            if v.len() != n_layer {
                return Err(Error::BadKey {
                    key: key.into(),
                    msg: format!("has {} entries for {n_layer} layers", v.len()),
                });
            }
            v.iter().map(|&b| b != 0).collect()
        }
        Some(_) => {
            let period = meta.require(key, meta.get_u64(key))? as usize;
            if period == 0 {
                return Err(Error::BadKey {
                    key: key.into(),
                    msg: "a period of 0".into(),
                });
            }
            (0..n_layer).map(|il| il % period < period - 1).collect()
        }
        None => (0..n_layer)
            .map(|il| il % DEFAULT_PERIOD < DEFAULT_PERIOD - 1)
            .collect(),
    };
    if h.n_swa.is_none() {
        h.swa_layers.fill(false);
    }
    h.rope_freq_base_swa = rope_base(meta, "gemma3.rope.freq_base_swa")?
        .or(rope_base(meta, "gemma3.rope.local.freq_base")?)
        .unwrap_or(10_000.0);
    h.rope_freq_scale_swa = 1.0;
    // Gemma 3 27B scales by n_embd / n_head instead of the head size (query_pre_attn_scalar).
    let scalar = if n_layer == 62 {
        (h.n_embd / h.n_head[0]) as f32
    } else {
        h.head_dim_k as f32
    };
    h.attention_scale = 1.0 / scalar.sqrt();
    Ok(())
}
