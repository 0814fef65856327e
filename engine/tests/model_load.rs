//! Loading: every hyperparameter and tensor an architecture needs must be in the file, with the
//! right shape, or the error names what is missing or wrong; model information for the daemon.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use engine::gguf::{Gguf, GgufWriter, Value};
use engine::quant::{FileType, GgmlType};
use engine::{Batch, Context, ContextParams, Error, KvType, Model, ModelParams};

#[path = "models/tiny_model.rs"]
mod tiny_model;

fn tiny(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/tiny")
        .join(name)
}

/// Writes a copy of `src` changed by `edit` (which may drop keys or tensors) and loads it.
fn load_edited(src: &Path, edit: impl FnOnce(&mut GgufWriter, &mut Vec<String>)) -> engine::Result<()> {
    let g = Gguf::open(src).unwrap();
    let mut w = GgufWriter::from_model(&g).unwrap();
    let mut drop = Vec::new();
    edit(&mut w, &mut drop);
    let mut out = GgufWriter::new();
    for (k, v) in w.metadata.iter() {
        out.set(k, v.clone());
    }
    let kept: Vec<_> = g
        .tensors()
        .iter()
        .filter(|t| !drop.contains(&t.info.name))
        .collect();
    for t in &kept {
        let dims = if drop.iter().any(|d| d == &format!("reshape:{}", t.info.name)) {
            vec![t.info.dims[0] * 2, t.info.dims[1] / 2]
        } else {
            t.info.dims.clone()
        };
        out.add_tensor(t.info.name.clone(), t.info.ty, &dims).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edited.gguf");
    out.write_file(&path, |i, _| Ok(Cow::Borrowed(g.tensor_data(kept[i]))))
        .unwrap();
    Model::load(&path, &ModelParams::default()).map(|_| ())
}

#[test]
fn missing_key_is_named() {
    let e = load_edited(&tiny("tiny-llama-spm-e64-f32.gguf"), |w, _| {
        w.metadata.remove("llama.attention.layer_norm_rms_epsilon");
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::MissingKey(k) if k == "llama.attention.layer_norm_rms_epsilon"),
        "{e}"
    );
    assert!(e.to_string().contains("llama.attention.layer_norm_rms_epsilon"));
}

/// Float hyperparameters no forward pass can use are refused at load, naming the key. A NaN in a
/// RoPE setting made the first decode panic; the others only gave NaN logits.
#[test]
fn unusable_float_hyperparameters_are_named() {
    let cases: &[(&str, f32)] = &[
        ("llama.rope.freq_base", f32::NAN),
        ("llama.rope.freq_base", 0.0),
        ("llama.rope.freq_base", -10_000.0),
        ("llama.rope.scaling.factor", f32::NAN),
        ("llama.rope.scaling.factor", -4.0),
        ("llama.rope.scale_linear", f32::INFINITY),
        ("llama.rope.scale_linear", -2.0),
        ("llama.rope.scaling.attn_factor", f32::NAN),
        ("llama.rope.scaling.yarn_beta_fast", f32::NEG_INFINITY),
        ("llama.attention.layer_norm_rms_epsilon", f32::NAN),
        ("llama.attention.layer_norm_rms_epsilon", -1e-5),
        ("llama.attention.logit_softcapping", f32::INFINITY),
        ("llama.final_logit_softcapping", f32::NAN),
        ("llama.attention.scale", f32::NAN),
    ];
    for &(key, v) in cases {
        let e = load_edited(&tiny("tiny-llama-spm-e64-f32.gguf"), |w, _| {
            w.set(key, Value::F32(v));
        })
        .unwrap_err();
        assert!(
            matches!(&e, Error::BadKey { key: k, .. } if k == key),
            "{key} = {v}: {e}"
        );
    }
    // Gemma 3's sliding-window layers have a base frequency of their own, under either key.
    let dir = tempfile::tempdir().unwrap();
    let gemma = dir.path().join("gemma3.gguf");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    tiny_model::write(tiny_model::spec("tiny-gemma3-f16"), &fixtures, &gemma);
    for key in ["gemma3.rope.freq_base_swa", "gemma3.rope.local.freq_base"] {
        for v in [f32::NAN, 0.0] {
            let e = load_edited(&gemma, |w, _| {
                w.set(key, Value::F32(v));
            })
            .unwrap_err();
            assert!(
                matches!(&e, Error::BadKey { key: k, .. } if k == key),
                "{key} = {v}: {e}"
            );
        }
    }
    // The limits themselves load: no epsilon, a scaling factor of 0 (none).
    for (key, v) in [
        ("llama.attention.layer_norm_rms_epsilon", 0.0),
        ("llama.rope.scaling.factor", 0.0),
    ] {
        load_edited(&tiny("tiny-llama-spm-e64-f32.gguf"), |w, _| {
            w.set(key, Value::F32(v));
        })
        .unwrap_or_else(|e| panic!("{key} = {v}: {e}"));
    }
}

/// A NaN among a file's RoPE frequency factors is data, like a NaN weight: the model runs, with
/// whatever logits the arithmetic gives. The first decode used to panic: each layer's table of
/// angles was looked up again by its RoPE's value, and a RoPE holding a NaN equals none.
#[test]
fn nan_rope_factors_do_not_panic() {
    let src = tiny("tiny-llama-spm-e64-f32.gguf");
    let g = Gguf::open(&src).unwrap();
    let n_pairs = Model::load(&src, &ModelParams::default())
        .unwrap()
        .hparams()
        .n_rot
        / 2;
    let mut w = GgufWriter::from_model(&g).unwrap();
    w.add_tensor("rope_freqs.weight", GgmlType::F32, &[n_pairs as u64])
        .unwrap();
    let factors: Vec<u8> = (0..n_pairs)
        .flat_map(|i| if i == 1 { f32::NAN } else { 1.0f32 }.to_le_bytes())
        .collect();
    let tensors = g.tensors();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nan-rope.gguf");
    w.write_file(&path, |i, _| {
        Ok(match tensors.get(i) {
            Some(t) => Cow::Borrowed(g.tensor_data(t)),
            None => Cow::Owned(factors.clone()),
        })
    })
    .unwrap();
    let m = Model::load(&path, &ModelParams::default()).unwrap();
    let params = ContextParams {
        n_ctx: 64,
        n_batch: 8,
        ..Default::default()
    };
    let mut ctx = Context::new(m, params).unwrap();
    ctx.decode(&Batch::from_tokens(&[1, 2, 3], 0, 0)).unwrap();
    ctx.decode(&Batch::from_tokens(&[4], 3, 0)).unwrap();
    assert!(ctx.logits(0).is_some());
}

#[test]
fn missing_tensor_is_named() {
    let e = load_edited(&tiny("tiny-llama-spm-e64-f32.gguf"), |_, drop| {
        drop.push("blk.1.ffn_up.weight".into());
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::MissingTensor(t) if t == "blk.1.ffn_up.weight"),
        "{e}"
    );
}

#[test]
fn wrong_shape_is_named() {
    let e = load_edited(&tiny("tiny-llama-spm-e64-f32.gguf"), |_, drop| {
        drop.push("reshape:blk.0.attn_q.weight".into());
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::BadTensor { tensor, .. } if tensor == "blk.0.attn_q.weight"),
        "{e}"
    );
}

#[test]
fn qwen2_needs_its_biases() {
    let e = load_edited(&tiny("tiny-qwen2-e32-f16.gguf"), |_, drop| {
        drop.push("blk.0.attn_k.bias".into());
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::MissingTensor(t) if t == "blk.0.attn_k.bias"),
        "{e}"
    );
}

#[test]
fn unknown_architecture_is_refused_clearly() {
    let e = load_edited(&tiny("tiny-llama-spm-e64-f32.gguf"), |w, _| {
        w.set("general.architecture", Value::String("mamba".into()));
    })
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("mamba") && msg.contains("llama") && msg.contains("gemma3"),
        "{msg}"
    );
}

#[test]
fn model_information() {
    let m = Model::load(tiny("tiny-llama-spm-e256-q4_k_m.gguf"), &ModelParams::default()).unwrap();
    assert_eq!(m.architecture(), "llama");
    assert_eq!((m.n_embd(), m.n_vocab(), m.n_layer()), (256, 32000, 2));
    assert_eq!(m.n_ctx_train(), 2048);
    assert_eq!(m.file_type(), Some(FileType::from_name("Q4_K_M").unwrap()));
    assert_eq!(m.pooling(), engine::model::Pooling::Mean);
    // Embeddings and output (32000 x 256 each), per layer Q and O (256 x 256), K and V (128 x 256,
    // GQA with 2 of 4 heads), three FFN matrices (256 x 512) and two norms, then the output norm.
    let per_layer: u64 = 2 * 256 * 256 + 2 * 128 * 256 + 3 * 256 * 512 + 2 * 256;
    assert_eq!(m.n_params(), 2 * 32000 * 256 + 2 * per_layer + 256);
    let e = m.estimate_memory(4096, 512, 1, KvType::F16);
    // 2 layers x 4096 cells x (128 keys + 128 values) x 2 bytes.
    assert_eq!(e.kv_cache, 2 * 4096 * 256 * 2);
    assert_eq!(e.weights, m.weights_size());
    assert!(e.scratch > 0 && e.total() == e.weights + e.kv_cache + e.scratch);
    let q8 = m.estimate_memory(4096, 512, 1, KvType::Q8_0);
    assert_eq!(q8.kv_cache, 2 * 4096 * 2 * (128 / 32 * 34));
    assert_eq!(m.chat_template(), None);
}

#[test]
fn decode_reads_the_embedding_table_only_when_it_is_the_output() {
    // Separate output (Q6_K): a token reads one Q4_K row of the 32000 x 256 embedding table.
    let m = Model::load(tiny("tiny-llama-spm-e256-q4_k_m.gguf"), &ModelParams::default()).unwrap();
    let embd = m.gguf().tensor("token_embd.weight").unwrap().info.size;
    assert_eq!(embd, 32000 * 144);
    assert_eq!(m.decode_read_bytes(), m.weights_size() - embd + 144);
    // Tied: the table is the output layer, read in full.
    let tied = Model::load(
        tiny("tiny-llama-spm-e256-tied-q6_k.gguf"),
        &ModelParams::default(),
    )
    .unwrap();
    assert_eq!(tied.decode_read_bytes(), tied.weights_size());
}

/// A vocabulary with fewer tokens than the model has rows is refused where the two meet (the
/// CLI's tools and the daemon's runner alike), instead of giving ids without text.
#[test]
fn a_vocabulary_that_does_not_fit_the_model_is_refused() {
    use engine::gguf::Array;
    let src = tiny("tiny-llama-spm-e64-q8_0.gguf");
    let g = Gguf::open(&src).unwrap();
    let md = g.metadata();
    let mut w = GgufWriter::from_model(&g).unwrap();
    let tokens = md
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap()
        .unwrap()
        .to_vec();
    let scores = md.get_f32_array("tokenizer.ggml.scores").unwrap().unwrap();
    let types = md.get_i64_array("tokenizer.ggml.token_type").unwrap().unwrap();
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(tokens[..100].to_vec().into())),
    );
    w.set(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(scores[..100].to_vec())),
    );
    w.set(
        "tokenizer.ggml.token_type",
        Value::Array(Array::I32(types[..100].iter().map(|&t| t as i32).collect())),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short-vocab.gguf");
    let tensors = g.tensors();
    w.write_file(&path, |i, _| Ok(Cow::Borrowed(g.tensor_data(&tensors[i]))))
        .unwrap();
    let m = Model::load(&path, &ModelParams::default()).unwrap();
    let err = m.vocab().unwrap_err().to_string();
    assert!(
        err.contains("the vocabulary has 100 tokens, the model 32000"),
        "{err}"
    );
    let m = Model::load(&src, &ModelParams::default()).unwrap();
    assert_eq!(m.vocab().unwrap().n_tokens(), 32000);
}
