//! The declarative description of an architecture: what the shared transformer machinery
//! (`super::forward`) needs to know to run it. Each supported architecture is one constant of this
//! type in its own file.

use super::hparams::HParams;
use crate::gguf::Metadata;
use crate::ops::rope::RopeStyle;
use crate::Result;

/// Whether a family of tensors is part of the architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Absent,
    /// Used when the file has it (e.g. llama's optional biases).
    Optional,
    /// A file without it is an error naming the tensor.
    Required,
}

/// How the feed-forward network combines its projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ffn {
    /// `down(silu(gate(x)) * up(x))`.
    SiluGated,
    /// `down(gelu_tanh(gate(x)) * up(x))`.
    GeluGated,
    /// phi3: one fused `ffn_up` of `2 * n_ff` rows, the first half is the gate:
    /// `down(silu(u[..n_ff]) * u[n_ff..])`.
    SiluFusedUp,
}

/// Where the attention scale is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QScale {
    /// Scores are scaled in the softmax: `{arch}.attention.scale` if set, else `1/sqrt(head_dim)`.
    InSoftmax,
    /// Q is multiplied by the layer's attention scale after RoPE and the softmax uses 1
    /// (gemma3, phi3).
    PreScaleQ,
}

/// Per-architecture hyperparameter rules that are not simply metadata keys.
pub type HParamsHook = fn(&mut HParams, &Metadata) -> Result<()>;

#[derive(Clone, Copy)]
pub struct Arch {
    /// `general.architecture`, also the prefix of the `{arch}.*` metadata keys.
    pub name: &'static str,
    pub rope: RopeStyle,
    /// Q/K/V may come as one `attn_qkv` tensor (split by rows: Q, then K, then V).
    pub fused_qkv: bool,
    pub qkv_bias: Presence,
    /// `attn_output.bias`.
    pub out_bias: Presence,
    /// RMS norm of each Q and K head (`attn_q_norm`, `attn_k_norm`) before RoPE.
    pub qk_norm: bool,
    /// `post_attention_norm` and `post_ffw_norm` on the branch outputs before the residual adds.
    pub post_norms: bool,
    /// Token embeddings are multiplied by `sqrt(n_embd)`.
    pub scale_embeddings: bool,
    pub ffn: Ffn,
    /// `ffn_{gate,up,down}.bias`.
    pub ffn_bias: Presence,
    pub q_scale: QScale,
    pub hparams: Option<HParamsHook>,
}

impl Arch {
    /// The common case: a pre-norm llama-style decoder; architectures override what differs.
    pub const BASE: Arch = Arch {
        name: "",
        rope: RopeStyle::Norm,
        fused_qkv: false,
        qkv_bias: Presence::Absent,
        out_bias: Presence::Absent,
        qk_norm: false,
        post_norms: false,
        scale_embeddings: false,
        ffn: Ffn::SiluGated,
        ffn_bias: Presence::Absent,
        q_scale: QScale::InSoftmax,
        hparams: None,
    };
}

/// Every supported architecture.
pub const ARCHITECTURES: &[Arch] = &[
    super::llama::ARCH,
    super::qwen2::ARCH,
    super::qwen3::ARCH,
    super::gemma3::ARCH,
    super::phi3::ARCH,
];

pub fn find(name: &str) -> Option<&'static Arch> {
    ARCHITECTURES.iter().find(|a| a.name == name)
}
