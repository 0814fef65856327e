//! Writes a TinyLlama-1.1B-shaped llama model with random weights in F16, for speed measurements:
//! `cargo run --release -p engine --example bench_model -- OUT.gguf [N_LAYER] [llama|phi3]`, then
//! `ollamars quantize OUT.gguf q4_0.gguf q4_0` (and so on) for each weight type to compare.
//! `phi3` writes the same sizes as phi3 does, Q/K/V in one `attn_qkv` tensor and gate/up in one
//! `ffn_up`, which the engine reads as row ranges.
//!
//! Shape of TinyLlama 1.1B: 22 layers, n_embd 2048, n_ff 5632, 32 heads / 4 KV heads (head 64),
//! a 32000-token Llama 2 SPM vocabulary, weights N(0, 0.02). The vocabulary's first 512 tokens
//! come from the shared fixtures' SPM vocabulary; the rest are filler pieces (only ids are fed,
//! the tokenizer just has to load). Tensors are generated one at a time, never all in memory.

use std::borrow::Cow;
use std::path::PathBuf;

use engine::gguf::{Array, Gguf, GgufWriter, Value};
use engine::quant::GgmlType;

const N_VOCAB: usize = 32000;
const N_EMBD: usize = 2048;
const N_FF: usize = 5632;
const N_HEAD: usize = 32;
const N_HEAD_KV: usize = 4;
const HEAD_DIM: usize = 64;

/// splitmix64, then Box-Muller.
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: bench_model OUT.gguf [N_LAYER] [llama|phi3]");
        std::process::exit(2);
    };
    let (out, n_layer, a) = match args.as_slice() {
        [_, out] => (PathBuf::from(out), 22, "llama"),
        [_, out, n] => (PathBuf::from(out), n.parse().unwrap_or_else(|_| usage()), "llama"),
        [_, out, n, arch] if arch == "llama" || arch == "phi3" => (
            PathBuf::from(out),
            n.parse().unwrap_or_else(|_| usage()),
            arch.as_str(),
        ),
        _ => usage(),
    };
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    let src = Gguf::open(fixtures.join("quant/src-f32.gguf")).expect("shared fixture quant/src-f32.gguf");
    let meta = src.metadata();
    let mut tokens = meta
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap()
        .unwrap()
        .to_vec();
    let mut scores: Vec<f32> = meta
        .get_f32_array("tokenizer.ggml.scores")
        .unwrap()
        .unwrap()
        .to_vec();
    let mut types: Vec<i32> = meta
        .get_i64_array("tokenizer.ggml.token_type")
        .unwrap()
        .unwrap()
        .iter()
        .map(|&t| t as i32)
        .collect();
    for i in tokens.len()..N_VOCAB {
        tokens.push(format!("▁filler{i}"));
        scores.push(-1000.0 - i as f32);
        types.push(1);
    }

    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String(a.into()));
    w.set(
        "general.name",
        Value::String(format!(
            "{}-1.1b-shaped-random",
            if a == "phi3" { "phi3" } else { "tinyllama" }
        )),
    );
    w.set("general.file_type", Value::U32(1));
    for (k, v) in meta.iter() {
        if k.starts_with("tokenizer.") {
            w.set(k, v.clone());
        }
    }
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(tokens.into())),
    );
    w.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    let u32v = |v: usize| Value::U32(v as u32);
    w.set(format!("{a}.context_length"), u32v(2048));
    w.set(format!("{a}.embedding_length"), u32v(N_EMBD));
    w.set(format!("{a}.block_count"), u32v(n_layer));
    w.set(format!("{a}.feed_forward_length"), u32v(N_FF));
    w.set(format!("{a}.attention.head_count"), u32v(N_HEAD));
    w.set(format!("{a}.attention.head_count_kv"), u32v(N_HEAD_KV));
    w.set(format!("{a}.rope.dimension_count"), u32v(HEAD_DIM));
    w.set(format!("{a}.rope.freq_base"), Value::F32(10000.0));
    w.set(format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-5));
    w.set(format!("{a}.vocab_size"), u32v(N_VOCAB));

    // Tensors in llama.cpp's order.
    let mut tensors: Vec<(String, Vec<u64>)> =
        vec![("token_embd.weight".into(), vec![N_EMBD as u64, N_VOCAB as u64])];
    let (nq, nkv) = (N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM);
    for il in 0..n_layer {
        let b = |s: &str| format!("blk.{il}.{s}");
        tensors.push((b("attn_norm.weight"), vec![N_EMBD as u64]));
        if a == "phi3" {
            tensors.push((b("attn_qkv.weight"), vec![N_EMBD as u64, (nq + 2 * nkv) as u64]));
        } else {
            tensors.push((b("attn_q.weight"), vec![N_EMBD as u64, nq as u64]));
            tensors.push((b("attn_k.weight"), vec![N_EMBD as u64, nkv as u64]));
            tensors.push((b("attn_v.weight"), vec![N_EMBD as u64, nkv as u64]));
        }
        tensors.push((b("attn_output.weight"), vec![nq as u64, N_EMBD as u64]));
        tensors.push((b("ffn_norm.weight"), vec![N_EMBD as u64]));
        if a == "phi3" {
            tensors.push((b("ffn_up.weight"), vec![N_EMBD as u64, 2 * N_FF as u64]));
        } else {
            tensors.push((b("ffn_gate.weight"), vec![N_EMBD as u64, N_FF as u64]));
            tensors.push((b("ffn_up.weight"), vec![N_EMBD as u64, N_FF as u64]));
        }
        tensors.push((b("ffn_down.weight"), vec![N_FF as u64, N_EMBD as u64]));
    }
    tensors.push(("output_norm.weight".into(), vec![N_EMBD as u64]));
    tensors.push(("output.weight".into(), vec![N_EMBD as u64, N_VOCAB as u64]));
    for (name, dims) in &tensors {
        let ty = if dims.len() == 1 {
            GgmlType::F32
        } else {
            GgmlType::F16
        };
        w.add_tensor(name.clone(), ty, dims).unwrap();
    }
    let mut rng = Rng(1_100_000_000);
    w.write_file(&out, |i, _| {
        let dims = &tensors[i].1;
        let n: u64 = dims.iter().product();
        let bytes: Vec<u8> = if dims.len() == 1 {
            (0..n).flat_map(|_| 1f32.to_le_bytes()).collect()
        } else {
            (0..n)
                .flat_map(|_| half::f16::from_f32(0.02 * rng.normal()).to_bits().to_le_bytes())
                .collect()
        };
        Ok(Cow::Owned(bytes))
    })
    .unwrap();
    println!("{}", out.display());
}
