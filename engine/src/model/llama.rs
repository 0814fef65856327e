//! `llama`: Llama 2/3/3.x, Mistral, TinyLlama, SmolLM. Adjacent-pair RoPE (the converter permutes
//! Q/K rows to it), optional biases, Llama 3 frequency scaling through `rope_freqs`.

use super::arch::{Arch, Presence};

pub const ARCH: Arch = Arch {
    name: "llama",
    qkv_bias: Presence::Optional,
    out_bias: Presence::Optional,
    ffn_bias: Presence::Optional,
    ..Arch::BASE
};
