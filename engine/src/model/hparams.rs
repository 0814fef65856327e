//! Hyperparameters read from a GGUF file's `{arch}.*` metadata keys, with llama.cpp's defaults.

use super::arch::Arch;
use crate::gguf::Metadata;
use crate::{Error, Result};

/// How RoPE frequencies are scaled beyond the training context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeScaling {
    None,
    Linear,
    Yarn,
    LongRope,
}

/// How a sequence's token embeddings are pooled into one vector (`{arch}.pooling_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    /// The first token's (BERT's `[CLS]`).
    Cls,
    Last,
}

#[derive(Clone, Debug)]
pub struct HParams {
    pub n_vocab: usize,
    pub n_ctx_train: u32,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: Vec<usize>,
    pub n_head_kv: Vec<usize>,
    pub n_ff: Vec<usize>,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub n_rot: usize,
    pub rms_eps: f32,
    pub rope_freq_base: f32,
    pub rope_freq_scale: f32,
    pub rope_scaling: RopeScaling,
    pub n_ctx_orig_yarn: u32,
    pub rope_attn_factor: f32,
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
    /// Sliding window size of the windowed layers, if the architecture has any.
    pub n_swa: Option<u32>,
    pub swa_layers: Vec<bool>,
    pub rope_freq_base_swa: f32,
    pub rope_freq_scale_swa: f32,
    /// Attention scale; 0 means `1/sqrt(head_dim_k)`.
    pub attention_scale: f32,
    pub attn_softcap: f32,
    pub final_softcap: f32,
    pub pooling: Pooling,
}

impl HParams {
    pub fn read(arch: &Arch, meta: &Metadata, n_vocab: usize) -> Result<HParams> {
        let a = arch.name;
        let key = |k: &str| format!("{a}.{k}");
        let req_u64 = |k: &str| -> Result<u64> {
            let k = key(k);
            meta.require(&k, meta.get_u64(&k))
        };
        let positive = |k: &str, v: u64| -> Result<usize> {
            if v == 0 || v > (1 << 24) {
                return Err(Error::BadKey {
                    key: key(k),
                    msg: format!("{v} is out of range"),
                });
            }
            Ok(v as usize)
        };
        let n_layer = positive("block_count", req_u64("block_count")?)?;
        if n_layer > 4096 {
            return Err(Error::BadKey {
                key: key("block_count"),
                msg: format!("{n_layer} layers"),
            });
        }
        let per_layer = |k: &str, required: bool| -> Result<Option<Vec<usize>>> {
            let full = key(k);
            match meta.get_per_layer_u64(&full, n_layer)? {
                Some(v) => v
                    .into_iter()
                    .map(|x| positive(k, x))
                    .collect::<Result<Vec<_>>>()
                    .map(Some),
                None if required => Err(Error::MissingKey(full)),
                None => Ok(None),
            }
        };
        let n_embd = positive("embedding_length", req_u64("embedding_length")?)?;
        let n_ff = per_layer("feed_forward_length", true)?.unwrap_or_default();
        let n_head = per_layer("attention.head_count", true)?.unwrap_or_default();
        let n_head_kv = per_layer("attention.head_count_kv", false)?.unwrap_or_else(|| n_head.clone());
        for (il, (&h, &kv)) in n_head.iter().zip(&n_head_kv).enumerate() {
            if h % kv != 0 {
                return Err(Error::BadKey {
                    key: key("attention.head_count_kv"),
                    msg: format!("layer {il}: {h} heads are not a multiple of {kv} KV heads"),
                });
            }
        }
        let opt_u64 = |k: &str| meta.get_u64(&key(k));
        let opt_f32 = |k: &str| finite_f32(meta, &key(k));
        let head_dim_k = match opt_u64("attention.key_length")? {
            Some(v) => positive("attention.key_length", v)?,
            None => n_embd / n_head[0],
        };
        let head_dim_v = match opt_u64("attention.value_length")? {
            Some(v) => positive("attention.value_length", v)?,
            None => n_embd / n_head[0],
        };
        let n_rot = match opt_u64("rope.dimension_count")? {
            Some(v) => positive("rope.dimension_count", v)?,
            None => head_dim_k,
        };
        if n_rot > head_dim_k || n_rot % 2 != 0 {
            return Err(Error::BadKey {
                key: key("rope.dimension_count"),
                msg: format!("{n_rot} rotated dimensions for heads of {head_dim_k}"),
            });
        }
        let rms_key = key("attention.layer_norm_rms_epsilon");
        let rms_eps = meta.require(&rms_key, finite_f32(meta, &rms_key))?;
        if rms_eps < 0.0 {
            return Err(Error::BadKey {
                key: rms_key,
                msg: format!("{rms_eps} is negative"),
            });
        }
        let n_ctx_train = u32::try_from(req_u64("context_length")?).map_err(|_| Error::BadKey {
            key: key("context_length"),
            msg: "out of range".into(),
        })?;
        let rope_scaling = match meta.get_str(&key("rope.scaling.type"))? {
            None | Some("linear") => RopeScaling::Linear,
            Some("none") => RopeScaling::None,
            Some("yarn") => RopeScaling::Yarn,
            Some("longrope") => RopeScaling::LongRope,
            Some(other) => {
                return Err(Error::BadKey {
                    key: key("rope.scaling.type"),
                    msg: format!("unknown RoPE scaling type '{other}'"),
                })
            }
        };
        let (factor_key, factor) = match opt_f32("rope.scaling.factor")? {
            Some(f) => ("rope.scaling.factor", f),
            None => ("rope.scale_linear", opt_f32("rope.scale_linear")?.unwrap_or(0.0)),
        };
        if factor < 0.0 {
            return Err(Error::BadKey {
                key: key(factor_key),
                msg: format!("RoPE scaling factor {factor} is negative"),
            });
        }
        let rope_freq_scale = if rope_scaling == RopeScaling::None || factor == 0.0 {
            1.0
        } else {
            1.0 / factor
        };
        let n_ctx_orig_yarn = match opt_u64("rope.scaling.original_context_length")? {
            Some(v) if v > 0 => u32::try_from(v).unwrap_or(n_ctx_train),
            _ => n_ctx_train,
        };
        let pooling = match meta.get_i64(&key("pooling_type"))? {
            None | Some(-1) | Some(0) | Some(1) => Pooling::Mean,
            Some(2) => Pooling::Cls,
            Some(3) => Pooling::Last,
            Some(other) => {
                return Err(Error::BadKey {
                    key: key("pooling_type"),
                    msg: format!("pooling type {other} is not supported (mean, cls, last)"),
                })
            }
        };
        let n_swa = match opt_u64("attention.sliding_window")? {
            Some(v) => Some(u32::try_from(v).map_err(|_| Error::BadKey {
                key: key("attention.sliding_window"),
                msg: "out of range".into(),
            })?),
            None => None,
        };
        let mut h = HParams {
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_ff,
            head_dim_k,
            head_dim_v,
            n_rot,
            rms_eps,
            rope_freq_base: rope_base(meta, &key("rope.freq_base"))?.unwrap_or(10_000.0),
            rope_freq_scale,
            rope_scaling,
            n_ctx_orig_yarn,
            rope_attn_factor: opt_f32("rope.scaling.attn_factor")?.unwrap_or(1.0),
            yarn_beta_fast: opt_f32("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
            yarn_beta_slow: opt_f32("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
            n_swa,
            swa_layers: vec![false; n_layer],
            rope_freq_base_swa: 10_000.0,
            rope_freq_scale_swa: 1.0,
            attention_scale: opt_f32("attention.scale")?.unwrap_or(0.0),
            attn_softcap: opt_f32("attention.logit_softcapping")?.unwrap_or(0.0),
            final_softcap: opt_f32("final_logit_softcapping")?.unwrap_or(0.0),
            pooling,
        };
        if let Some(hook) = arch.hparams {
            hook(&mut h, meta)?;
        }
        if !h.swa_layers.iter().any(|&s| s) {
            h.n_swa = None;
        }
        Ok(h)
    }

    pub fn n_embd_k_gqa(&self, il: usize) -> usize {
        self.n_head_kv[il] * self.head_dim_k
    }

    pub fn n_embd_v_gqa(&self, il: usize) -> usize {
        self.n_head_kv[il] * self.head_dim_v
    }

    /// The scale applied to attention scores (or to Q, for architectures that pre-scale it).
    pub fn attention_scale(&self) -> f32 {
        if self.attention_scale != 0.0 {
            self.attention_scale
        } else {
            1.0 / (self.head_dim_k as f32).sqrt()
        }
    }
}

/// An optional float hyperparameter. NaN or infinity (a corrupt or hand-edited file) is an error
/// naming the key: in the forward pass it would only turn every logit into NaN.
pub(super) fn finite_f32(meta: &Metadata, key: &str) -> Result<Option<f32>> {
    match meta.get_f32(key)? {
        Some(v) if !v.is_finite() => Err(Error::BadKey {
            key: key.to_string(),
            msg: format!("{v} is not a finite number"),
        }),
        v => Ok(v),
    }
}

/// An optional RoPE base frequency: [`finite_f32`] and above zero, since its negative powers are
/// the rotation speeds (zero or below gives infinite or NaN angles).
pub(super) fn rope_base(meta: &Metadata, key: &str) -> Result<Option<f32>> {
    match finite_f32(meta, key)? {
        Some(v) if v <= 0.0 => Err(Error::BadKey {
            key: key.to_string(),
            msg: format!("RoPE base frequency {v} is not positive"),
        }),
        v => Ok(v),
    }
}
