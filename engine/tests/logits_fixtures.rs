//! The forward pass against llama.cpp's reference logits (`../shared/fixtures/tiny/`, and our own
//! fixtures in `engine/tests/data/logits/`): the same top-1 token at every recorded position
//! (except llama.cpp's own near-ties), logits within 1e-2 for F32/F16 models, and KL divergence of
//! the last position's softmax below 1e-3 for quantized ones.

use std::path::{Path, PathBuf};

use engine::{Batch, Context, ContextParams, Model, ModelParams};
use serde_json::Value;
use sha2::{Digest, Sha256};

#[path = "models/tiny_model.rs"]
mod tiny_model;

fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures")
}

fn shared_tiny() -> PathBuf {
    shared().join("tiny")
}

/// Near-ties in llama.cpp's own output: either token is right there.
const NEAR_TIE: f64 = 2e-2;

struct Report {
    max_abs_last: f64,
    max_abs_all: Option<f64>,
    kl_last: f64,
}

fn logsumexp(x: &[f64]) -> f64 {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    m + x.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
}

/// KL(reference || ours) of the softmax distributions.
fn kl(reference: &[f64], ours: &[f64]) -> f64 {
    let (lr, lo) = (logsumexp(reference), logsumexp(ours));
    reference
        .iter()
        .zip(ours)
        .map(|(r, o)| {
            let (pr, lpr, lpo) = ((r - lr).exp(), r - lr, o - lo);
            pr * (lpr - lpo)
        })
        .sum()
}

fn check_fixture(json_path: &Path, gguf_dir: &Path) -> Report {
    let fx: Value = serde_json::from_slice(&std::fs::read(json_path).unwrap()).unwrap();
    let name = json_path.file_name().unwrap().to_string_lossy().to_string();
    let model_path = gguf_dir.join(fx["model_file"].as_str().unwrap());
    let model = Model::load(&model_path, &ModelParams::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let tokens: Vec<u32> = fx["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let n_vocab = model.n_vocab();
    assert_eq!(n_vocab as u64, fx["n_vocab"].as_u64().unwrap(), "{name}");
    let mut ctx = Context::new(
        model,
        ContextParams {
            n_ctx: 128,
            n_threads: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let mut batch = Batch::new();
    for (i, &t) in tokens.iter().enumerate() {
        batch.add(t, i as i32, 0, true);
    }
    ctx.decode(&batch).unwrap();

    for pp in fx["per_position"].as_array().unwrap() {
        let pos = pp["pos"].as_u64().unwrap() as usize;
        let ids = pp["top10_ids"].as_array().unwrap();
        let top = pp["top10_logits"].as_array().unwrap();
        let margin = top[0].as_f64().unwrap() - top[1].as_f64().unwrap();
        let ours = engine::generate::argmax(ctx.logits(pos).unwrap());
        let theirs = ids[0].as_u64().unwrap() as u32;
        if margin >= NEAR_TIE {
            assert_eq!(ours, theirs, "{name}: top-1 at position {pos} (margin {margin})");
        } else {
            let second = ids[1].as_u64().unwrap() as u32;
            assert!(
                ours == theirs || ours == second,
                "{name}: position {pos} near-tie: ours {ours}, llama.cpp {theirs}/{second}"
            );
        }
    }

    let last = tokens.len() - 1;
    let reference: Vec<f64> = fx["logits_last"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let ours: Vec<f64> = ctx.logits(last).unwrap().iter().map(|&v| f64::from(v)).collect();
    let max_abs_last = reference
        .iter()
        .zip(&ours)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let kl_last = kl(&reference, &ours);

    let max_abs_all = fx
        .get("all_positions_file")
        .and_then(|f| f["file"].as_str())
        .map(|f| {
            let bytes = std::fs::read(gguf_dir.join(f)).unwrap();
            let all: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let mut m = 0f64;
            for (pos, row) in all.chunks_exact(n_vocab).enumerate() {
                for (a, b) in row.iter().zip(ctx.logits(pos).unwrap()) {
                    m = m.max(f64::from((a - b).abs()));
                }
            }
            m
        });
    println!(
        "{name}: max |delta logit| last {max_abs_last:.2e}{}, KL last {kl_last:.2e}",
        max_abs_all.map_or(String::new(), |m| format!(", all positions {m:.2e}"))
    );
    Report {
        max_abs_last,
        max_abs_all,
        kl_last,
    }
}

fn assert_float_fixture(json: &str) {
    let r = check_fixture(&shared_tiny().join(json), &shared_tiny());
    assert!(r.max_abs_last < 1e-2, "{json}: max |delta| {}", r.max_abs_last);
    assert!(r.kl_last < 1e-3, "{json}: KL {}", r.kl_last);
    if let Some(m) = r.max_abs_all {
        assert!(m < 1e-2, "{json}: max |delta| over all positions {m}");
    }
}

#[test]
fn llama_f32() {
    assert_float_fixture("tiny-llama-spm-e64-f32.json");
}

#[test]
fn llama_f16() {
    assert_float_fixture("tiny-llama-spm-e64-f16.json");
}

#[test]
fn qwen2_f16() {
    assert_float_fixture("tiny-qwen2-e32-f16.json");
}

/// Our own fixtures: the model is written again by the same generator (checked by its sha256)
/// and compared at every position with llama.cpp's logits recorded by `scripts/measure-logits.py`.
fn check_own_fixture(name: &str) {
    check_own_fixture_in_batches(name, 512);
}

/// With micro-batches of `n_batch` tokens (a sliding-window pool then holds window + n_batch cells).
fn check_own_fixture_in_batches(name: &str, n_batch: u32) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/logits/{name}.json"));
    let fx: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("model.gguf");
    let spec = tiny_model::spec(fx["model"].as_str().unwrap());
    tiny_model::write(spec, &shared(), &model_path);
    let sha = format!("{:x}", Sha256::digest(std::fs::read(&model_path).unwrap()));
    assert_eq!(
        sha,
        fx["model_sha256"].as_str().unwrap(),
        "{name}: the generator no longer writes the measured file"
    );
    let tokens: Vec<u32> = fx["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(tokens, tiny_model::prompt());
    let model = Model::load(&model_path, &ModelParams::default()).unwrap();
    let mut ctx = Context::new(
        model,
        ContextParams {
            n_ctx: fx["n_ctx"].as_u64().unwrap() as u32,
            n_batch,
            n_threads: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let mut batch = Batch::new();
    for (i, &t) in tokens.iter().enumerate() {
        batch.add(t, i as i32, 0, true);
    }
    ctx.decode(&batch).unwrap();
    let mut max_abs = 0f64;
    let mut kl_max = 0f64;
    for (pos, row) in fx["logits"].as_array().unwrap().iter().enumerate() {
        let reference: Vec<f64> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let ours: Vec<f64> = ctx.logits(pos).unwrap().iter().map(|&v| f64::from(v)).collect();
        for (a, b) in reference.iter().zip(&ours) {
            max_abs = max_abs.max((a - b).abs());
        }
        kl_max = kl_max.max(kl(&reference, &ours));
        let mut sorted: Vec<(usize, f64)> = reference.iter().copied().enumerate().collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
        let ours_top = engine::generate::argmax(ctx.logits(pos).unwrap()) as usize;
        if sorted[0].1 - sorted[1].1 >= NEAR_TIE {
            assert_eq!(ours_top, sorted[0].0, "{name}: top-1 at position {pos}");
        } else {
            assert!(
                ours_top == sorted[0].0 || ours_top == sorted[1].0,
                "{name}: near-tie at {pos}"
            );
        }
    }
    println!("{name}: max |delta logit| over all positions {max_abs:.2e}, max KL {kl_max:.2e}");
    assert!(max_abs < 1e-2, "{name}: max |delta logit| {max_abs}");
    assert!(kl_max < 1e-3, "{name}: KL {kl_max}");
}

#[test]
fn qwen3_f16_own_fixture() {
    check_own_fixture("tiny-qwen3-f16");
}

#[test]
fn gemma3_f16_own_fixture() {
    check_own_fixture("tiny-gemma3-f16");
}

#[test]
fn gemma3_small_sliding_window_pool() {
    // Window 4: with micro-batches of 1 and 3 tokens the windowed layers' pool has 5 and 7 cells,
    // reused as tokens leave the window, and every position still gets llama.cpp's logits.
    check_own_fixture_in_batches("tiny-gemma3-f16", 1);
    check_own_fixture_in_batches("tiny-gemma3-f16", 3);
}

#[test]
fn phi3_f32_own_fixture() {
    check_own_fixture("tiny-phi3-f32");
}

#[test]
fn phi3_f32_long_context_own_fixture() {
    check_own_fixture("tiny-phi3-f32-ctx2048");
}

fn assert_quantized_fixture(json: &str) {
    let r = check_fixture(&shared_tiny().join(json), &shared_tiny());
    assert!(r.kl_last < 1e-3, "{json}: KL {}", r.kl_last);
}

#[test]
fn llama_q8_0() {
    assert_quantized_fixture("tiny-llama-spm-e64-q8_0.json");
}

#[test]
fn llama_q4_0() {
    assert_quantized_fixture("tiny-llama-spm-e64-q4_0.json");
}

#[test]
fn llama_q4_k_m() {
    assert_quantized_fixture("tiny-llama-spm-e256-q4_k_m.json");
}

#[test]
fn llama_q6_k_tied() {
    assert_quantized_fixture("tiny-llama-spm-e256-tied-q6_k.json");
}
