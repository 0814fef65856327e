//! Models: loading a GGUF file into an immutable [`Model`] (shared by any number of contexts),
//! the architectures it can run, and the shared forward pass.
//!
//! An architecture is a short declarative [`arch::Arch`] in its own file (`llama`, `qwen2`,
//! `qwen3`, `gemma3`, `phi3`); `hparams` reads the `{arch}.*` metadata, `weights` finds the tensors,
//! `forward` runs the transformer they describe.

mod arch;
pub(crate) mod forward;
mod gemma3;
mod hparams;
mod llama;
mod pack;
mod phi3;
mod qwen2;
mod qwen3;
mod weights;

use std::path::Path;
use std::sync::Arc;

pub use hparams::{HParams, Pooling, RopeScaling};
pub use pack::{reading, Reading};

use crate::gguf::{Gguf, Metadata};
use crate::kv::{swa_pool_size, KvType};
use crate::ops::rope::Rope;
use crate::quant::FileType;
use crate::tokenizer::Vocab;
use crate::{Error, Result};
use weights::Weights;

/// Options for loading a model (none yet; kept so that adding some does not break callers).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ModelParams {}

/// A loaded model: its file mapped in memory, hyperparameters and the location of every weight.
/// Immutable, `Send + Sync`: share it (`Arc`) between contexts and threads.
pub struct Model {
    gguf: Gguf,
    arch: &'static arch::Arch,
    hp: HParams,
    w: Weights,
    /// The matrices repacked at load ([`pack`]).
    packed: pack::PackedWeights,
}

/// What a context of a given size will take in memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// Tensor data of the file (mapped; shared by every context of the model).
    pub weights: u64,
    pub kv_cache: u64,
    /// Work buffers of a forward pass of `n_batch` tokens plus the logits of one token per sequence.
    pub scratch: u64,
}

impl MemoryEstimate {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.scratch
    }
}

impl Model {
    /// Opens and checks a model: every hyperparameter and tensor the architecture needs must be
    /// there with the right shape, or the error names what is missing or wrong.
    pub fn load(path: impl AsRef<Path>, _params: &ModelParams) -> Result<Arc<Model>> {
        // The page faults of a load wait for any collapse to huge pages (`pack::PROCESS`).
        let _loading = pack::reading();
        let mut model = Model::from_gguf(Gguf::open(path)?)?;
        model.packed = pack::pack_weights(&model)?;
        Ok(Arc::new(model))
    }

    /// Waits until the packed weights have moved to huge pages, which a background thread does
    /// after [`Model::load`] (from 1 s on, at once while the model is idle, slowly while it
    /// runs): what follows then measures the steady state (`ollamars bench`).
    pub fn wait_for_huge_pages(&self) {
        self.packed.wait_for_huge_pages();
    }

    pub fn from_gguf(gguf: Gguf) -> Result<Model> {
        let meta = gguf.metadata();
        let name = meta.require("general.architecture", meta.get_str("general.architecture"))?;
        let arch = arch::find(name).ok_or_else(|| {
            let known: Vec<_> = arch::ARCHITECTURES.iter().map(|a| a.name).collect();
            Error::UnsupportedFormat(format!(
                "architecture '{name}' is not supported (supported: {})",
                known.join(", ")
            ))
        })?;
        let embd = gguf.require_tensor("token_embd.weight")?;
        let n_vocab = match embd.info.dims.as_slice() {
            [_, v] if *v > 0 && *v <= u32::MAX as u64 => *v as usize,
            dims => {
                return Err(Error::BadTensor {
                    tensor: "token_embd.weight".into(),
                    msg: format!("shape {dims:?} is not [n_embd, n_vocab]"),
                })
            }
        };
        let hp = HParams::read(arch, meta, n_vocab)?;
        let w = Weights::load(arch, &hp, &gguf)?;
        let packed = pack::PackedWeights::none(gguf.tensors().len());
        Ok(Model {
            gguf,
            arch,
            hp,
            w,
            packed,
        })
    }

    pub fn hparams(&self) -> &HParams {
        &self.hp
    }

    pub fn gguf(&self) -> &Gguf {
        &self.gguf
    }

    pub fn metadata(&self) -> &Metadata {
        self.gguf.metadata()
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> &'static str {
        self.arch.name
    }

    /// `general.name`, if the file has one.
    pub fn name(&self) -> Option<&str> {
        self.metadata().get_str("general.name").ok().flatten()
    }

    pub fn n_ctx_train(&self) -> u32 {
        self.hp.n_ctx_train
    }

    pub fn n_embd(&self) -> usize {
        self.hp.n_embd
    }

    pub fn n_vocab(&self) -> usize {
        self.hp.n_vocab
    }

    /// The model's vocabulary, from its metadata, checked against its output rows.
    pub fn vocab(&self) -> Result<Vocab> {
        let vocab = Vocab::from_metadata(self.metadata())?;
        self.check_vocab(&vocab)?;
        Ok(vocab)
    }

    /// A vocabulary fits the model when it has a token for each row of the model's embedding
    /// and output: with fewer, sampled ids would have no text (empty replies, or ids the
    /// tokenizer rejects); with more, token ids would index past the embedding.
    pub fn check_vocab(&self, vocab: &Vocab) -> Result<()> {
        if vocab.n_tokens() != self.n_vocab() {
            return Err(Error::InvalidArgument(format!(
                "the vocabulary has {} tokens, the model {}",
                vocab.n_tokens(),
                self.n_vocab()
            )));
        }
        Ok(())
    }

    pub fn n_layer(&self) -> usize {
        self.hp.n_layer
    }

    /// Number of parameters (elements of every tensor).
    pub fn n_params(&self) -> u64 {
        self.gguf.tensors().iter().map(|t| t.info.n_elements()).sum()
    }

    /// Bytes of tensor data.
    pub fn weights_size(&self) -> u64 {
        self.gguf.tensors().iter().map(|t| t.info.size).sum()
    }

    /// Bytes of tensor data one token's forward pass reads: every tensor but the token
    /// embedding table, of which it reads a single row, unless the file ties the output layer to
    /// that table (then it is read in full as the output). Decode is bound by this over the
    /// machine's read bandwidth.
    pub fn decode_read_bytes(&self) -> u64 {
        let tensors = self.gguf.tensors();
        let embd = &self.w.token_embd;
        let skipped = if self.w.output.tensor == embd.tensor {
            0
        } else {
            let row = embd.ty.row_bytes(embd.n_in as u64).unwrap_or(0);
            tensors[embd.tensor].info.size.saturating_sub(row)
        };
        self.weights_size() - skipped
    }

    /// `general.file_type` (the quantization mix), if recorded and known.
    pub fn file_type(&self) -> Option<FileType> {
        let id = self.metadata().get_u64("general.file_type").ok().flatten()?;
        FileType::from_id(u32::try_from(id).ok()?)
    }

    /// `tokenizer.chat_template`, if the file has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.metadata().get_str("tokenizer.chat_template").ok().flatten()
    }

    /// How embeddings are pooled (`{arch}.pooling_type`; mean when absent).
    pub fn pooling(&self) -> Pooling {
        self.hp.pooling
    }

    /// The sliding window of the windowed layers, if the model has any.
    pub fn sliding_window(&self) -> Option<u32> {
        self.hp.n_swa
    }

    /// Memory for a context of `n_ctx` cells (see [`crate::ContextParams`]).
    pub fn estimate_memory(&self, n_ctx: u32, n_batch: u32, n_seq: u32, kv_type: KvType) -> MemoryEstimate {
        let hp = &self.hp;
        let (n_ctx, n_batch, n_seq) = (
            n_ctx as u64,
            n_batch.min(n_ctx).max(1) as u64,
            n_seq.max(1) as u64,
        );
        let swa_cells = hp
            .n_swa
            .map(|w| swa_pool_size(n_ctx as usize, w as usize, n_seq as usize, n_batch as usize) as u64);
        let kv_cache = (0..hp.n_layer)
            .map(|il| {
                let cells = if hp.swa_layers[il] {
                    swa_cells.unwrap_or(n_ctx)
                } else {
                    n_ctx
                };
                let bytes = |n: usize| kv_type.row_bytes(n).unwrap_or(n * 2) as u64;
                cells * (bytes(hp.n_embd_k_gqa(il)) + bytes(hp.n_embd_v_gqa(il)))
            })
            .sum();
        // Per token of a batch: the residual stream and its norm, Q/K/V, attention output,
        // gate/up/down of the FFN, and the transposed matmul block (f32 each, plus their f16/q8
        // conversions, which are smaller).
        let max_ff = hp.n_ff.iter().copied().max().unwrap_or(0) as u64;
        let max_head = hp.n_head.iter().copied().max().unwrap_or(0) as u64;
        let q_dim = max_head * hp.head_dim_k.max(hp.head_dim_v) as u64;
        let per_token = 4 * (3 * hp.n_embd as u64 + 3 * q_dim + 4 * max_ff);
        let scratch = n_batch * per_token * 2 + n_seq * hp.n_vocab as u64 * 4 * 2;
        MemoryEstimate {
            weights: self.weights_size(),
            kv_cache,
            scratch,
        }
    }

    /// The RoPE of each layer for a context of `n_ctx_seq` positions per sequence (LongRoPE
    /// chooses its factors by it, as llama.cpp's `get_rope_factors`).
    pub(crate) fn layer_ropes(&self, n_ctx_seq: u32) -> Vec<Rope> {
        let hp = &self.hp;
        let ext_factor = if hp.rope_scaling == RopeScaling::Yarn {
            1.0
        } else {
            0.0
        };
        let factors = self.w.rope_freqs.clone().or_else(|| {
            if n_ctx_seq > hp.n_ctx_orig_yarn {
                self.w.rope_long.clone()
            } else {
                self.w.rope_short.clone()
            }
        });
        (0..hp.n_layer)
            .map(|il| {
                let (base, scale) = if hp.swa_layers[il] {
                    (hp.rope_freq_base_swa, hp.rope_freq_scale_swa)
                } else {
                    (hp.rope_freq_base, hp.rope_freq_scale)
                };
                // llama.cpp's `yarn_attn_factor`: YaRN's magnitude correction is applied in the
                // kernel and cancelled here, then the file's attention factor multiplies in.
                let mut attn_factor = 1.0f32;
                if ext_factor != 0.0 {
                    let factor = 1.0 / scale;
                    let mscale = if factor <= 1.0 {
                        1.0
                    } else {
                        0.1 * factor.ln() + 1.0
                    };
                    attn_factor = mscale / (1.0 + 0.1 * factor.ln());
                }
                attn_factor *= hp.rope_attn_factor;
                let mut rope = Rope {
                    freq_scale: scale,
                    ext_factor,
                    attn_factor,
                    freq_factors: factors.clone(),
                    ..Rope::new(self.arch.rope, hp.n_rot, base)
                };
                if ext_factor != 0.0 {
                    rope = rope.with_yarn(hp.n_ctx_orig_yarn, hp.yarn_beta_fast, hp.yarn_beta_slow);
                }
                rope
            })
            .collect()
    }
}
