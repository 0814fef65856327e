//! `qwen2`: Qwen2 and Qwen2.5. Llama's graph with NeoX RoPE and Q/K/V biases.

use super::arch::{Arch, Presence};
use crate::ops::rope::RopeStyle;

pub const ARCH: Arch = Arch {
    name: "qwen2",
    rope: RopeStyle::Neox,
    qkv_bias: Presence::Required,
    ..Arch::BASE
};
