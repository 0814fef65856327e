//! Loading: every hyperparameter and tensor an architecture needs must be in the file, with the
//! right shape, or the error names what is missing or wrong; model information for the daemon.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use engine::gguf::{Gguf, GgufWriter, Value};
use engine::quant::FileType;
use engine::{Error, KvType, Model, ModelParams};

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
