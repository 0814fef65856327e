//! Tiny random-weight models of each architecture, written with our `GgufWriter`, for logit
//! fixtures: the same bytes on every run (a seeded generator), so llama.cpp's logits measured once
//! on a file (`scripts/measure-logits.py`) stay valid for the file the tests write again.
//!
//! The tokenizer metadata is copied from the shared fixtures' 512-token Llama 2 SPM vocabulary so
//! that llama.cpp loads the files; the tests only feed token ids.

#![allow(dead_code)] // each test uses part of it

use std::borrow::Cow;
use std::path::Path;

use engine::gguf::{Array, Gguf, GgufWriter, Value};
use engine::quant::GgmlType;

/// A tiny model to generate.
pub struct Spec {
    pub name: &'static str,
    pub arch: &'static str,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_ctx_train: u32,
    pub rope_base: f32,
    pub eps: f32,
    /// Type of the matrices (vectors are always F32).
    pub ty: GgmlType,
    pub seed: u64,
}

/// The models of our own logit fixtures.
pub const SPECS: &[Spec] = &[
    Spec {
        name: "tiny-qwen3-f16",
        arch: "qwen3",
        n_layer: 2,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        // Q projects to 4 * 32 = 128 != n_embd: head size from `key_length`.
        head_dim: 32,
        n_ff: 128,
        n_ctx_train: 4096,
        rope_base: 1e6,
        eps: 1e-6,
        ty: GgmlType::F16,
        seed: 11,
    },
    Spec {
        name: "tiny-gemma3-f16",
        arch: "gemma3",
        // Six layers: five sliding-window layers, then a global one; the window (4) is shorter
        // than the prompt.
        n_layer: 6,
        n_embd: 64,
        n_head: 2,
        n_head_kv: 1,
        head_dim: 32,
        n_ff: 128,
        n_ctx_train: 4096,
        rope_base: 1e6,
        eps: 1e-6,
        ty: GgmlType::F16,
        seed: 12,
    },
    Spec {
        name: "tiny-phi3-f32",
        arch: "phi3",
        n_layer: 2,
        n_embd: 64,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 16,
        n_ff: 128,
        n_ctx_train: 4096,
        rope_base: 10000.0,
        eps: 1e-5,
        ty: GgmlType::F32,
        seed: 13,
    },
];

pub const GEMMA3_WINDOW: u32 = 4;
pub const PHI3_ORIG_CTX: u32 = 1024;

pub fn spec(name: &str) -> &'static Spec {
    SPECS.iter().find(|s| s.name == name).expect("known tiny model")
}

/// splitmix64, then Box-Muller: deterministic normal samples.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
}

fn vocab_source(fixtures: &Path) -> Gguf {
    Gguf::open(fixtures.join("quant/src-f32.gguf")).expect("shared fixture quant/src-f32.gguf")
}

/// Writes model `spec` to `out`; `fixtures` is the shared fixtures directory.
pub fn write(spec: &Spec, fixtures: &Path, out: &Path) {
    let vocab = vocab_source(fixtures);
    let n_vocab = 512usize;
    let a = spec.arch;
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String(a.into()));
    w.set("general.name", Value::String(spec.name.into()));
    for (k, v) in vocab.metadata().iter() {
        if k.starts_with("tokenizer.") {
            w.set(k, v.clone());
        }
    }
    if a == "phi3" {
        // llama.cpp's vocabulary loader looks these up by text for phi3.
        let meta = vocab.metadata();
        let mut tokens = meta
            .get_str_array("tokenizer.ggml.tokens")
            .unwrap()
            .unwrap()
            .to_vec();
        let mut types = meta.get_i64_array("tokenizer.ggml.token_type").unwrap().unwrap();
        for (id, text) in [(510, "<|end|>"), (511, "<|endoftext|>")] {
            tokens[id] = text.to_string();
            types[id] = 3;
        }
        w.set(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(tokens.into())),
        );
        let types = types.iter().map(|&t| t as i32).collect();
        w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    }
    let u32v = |v: usize| Value::U32(v as u32);
    w.set(format!("{a}.context_length"), Value::U32(spec.n_ctx_train));
    w.set(format!("{a}.embedding_length"), u32v(spec.n_embd));
    w.set(format!("{a}.block_count"), u32v(spec.n_layer));
    w.set(format!("{a}.feed_forward_length"), u32v(spec.n_ff));
    w.set(format!("{a}.attention.head_count"), u32v(spec.n_head));
    w.set(format!("{a}.attention.head_count_kv"), u32v(spec.n_head_kv));
    w.set(format!("{a}.attention.key_length"), u32v(spec.head_dim));
    w.set(format!("{a}.attention.value_length"), u32v(spec.head_dim));
    w.set(format!("{a}.rope.dimension_count"), u32v(spec.head_dim));
    w.set(format!("{a}.rope.freq_base"), Value::F32(spec.rope_base));
    w.set(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(spec.eps),
    );
    if a == "gemma3" {
        w.set(format!("{a}.attention.sliding_window"), Value::U32(GEMMA3_WINDOW));
    }
    if a == "phi3" {
        w.set(
            format!("{a}.rope.scaling.original_context_length"),
            Value::U32(PHI3_ORIG_CTX),
        );
        w.set(format!("{a}.rope.scaling.attn_factor"), Value::F32(1.19));
    }

    // Tensors in llama.cpp's order: embeddings, then per layer, then output norm.
    let (e, hd) = (spec.n_embd, spec.head_dim);
    let (nq, nkv) = (spec.n_head * hd, spec.n_head_kv * hd);
    let mut tensors: Vec<(String, Vec<u64>, bool)> =
        vec![("token_embd.weight".into(), vec![e as u64, n_vocab as u64], false)];
    let mat = |n: &str, i: usize, o: usize| (n.to_string(), vec![i as u64, o as u64], false);
    let vecn = |n: &str, len: usize| (n.to_string(), vec![len as u64], true);
    if a == "phi3" {
        tensors.push(vecn("rope_factors_long.weight", hd / 2));
        tensors.push(vecn("rope_factors_short.weight", hd / 2));
    }
    for il in 0..spec.n_layer {
        let b = |s: &str| format!("blk.{il}.{s}");
        tensors.push(vecn(&b("attn_norm.weight"), e));
        if a == "phi3" {
            tensors.push(mat(&b("attn_qkv.weight"), e, nq + 2 * nkv));
        } else {
            tensors.push(mat(&b("attn_q.weight"), e, nq));
            tensors.push(mat(&b("attn_k.weight"), e, nkv));
            tensors.push(mat(&b("attn_v.weight"), e, nkv));
        }
        if a == "qwen3" || a == "gemma3" {
            tensors.push(vecn(&b("attn_q_norm.weight"), hd));
            tensors.push(vecn(&b("attn_k_norm.weight"), hd));
        }
        tensors.push(mat(&b("attn_output.weight"), nq, e));
        if a == "gemma3" {
            tensors.push(vecn(&b("post_attention_norm.weight"), e));
        }
        tensors.push(vecn(&b("ffn_norm.weight"), e));
        if a == "phi3" {
            tensors.push(mat(&b("ffn_up.weight"), e, 2 * spec.n_ff));
        } else {
            tensors.push(mat(&b("ffn_gate.weight"), e, spec.n_ff));
            tensors.push(mat(&b("ffn_up.weight"), e, spec.n_ff));
        }
        tensors.push(mat(&b("ffn_down.weight"), spec.n_ff, e));
        if a == "gemma3" {
            tensors.push(vecn(&b("post_ffw_norm.weight"), e));
        }
    }
    tensors.push(vecn("output_norm.weight", e));

    let mut rng = Rng(spec.seed);
    let mut data: Vec<Vec<u8>> = Vec::new();
    for (name, dims, is_vec) in &tensors {
        let n: u64 = dims.iter().product();
        let ty = if *is_vec { GgmlType::F32 } else { spec.ty };
        w.add_tensor(name.clone(), ty, dims).unwrap();
        let values: Vec<f32> = (0..n)
            .map(|_| {
                if name.contains("rope_factors") {
                    1.0 + 0.5 * rng.uniform() as f32
                } else if *is_vec {
                    1.0 + 0.1 * rng.normal()
                } else {
                    // Scaled like trained weights so activations stay in range.
                    rng.normal() / (dims[0] as f32).sqrt()
                }
            })
            .collect();
        data.push(match ty {
            GgmlType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            GgmlType::F16 => values
                .iter()
                .flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes())
                .collect(),
            other => panic!("tiny models are F32/F16, not {other}"),
        });
    }
    w.write_file(out, |i, _| Ok(Cow::Borrowed(data[i].as_slice())))
        .unwrap();
}

/// The prompt of every fixture: BOS then pseudo-random ids of the 512-token vocabulary.
pub fn prompt() -> Vec<u32> {
    let mut rng = Rng(2024);
    std::iter::once(1)
        .chain((0..15).map(|_| 3 + (rng.next_u64() % 509) as u32))
        .collect()
}
