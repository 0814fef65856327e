//! `qwen3`: Qwen3 dense. NeoX RoPE, no biases, RMS norm of each Q and K head before RoPE; the head
//! size comes from `qwen3.attention.key_length` and may differ from `n_embd / n_head`.

use super::arch::Arch;
use crate::ops::rope::RopeStyle;

pub const ARCH: Arch = Arch {
    name: "qwen3",
    rope: RopeStyle::Neox,
    qk_norm: true,
    ..Arch::BASE
};
