//! The perplexity method against llama.cpp's figures for fixed token streams on tiny models
//! (recorded by `scripts/measure-logits.py`): same chunks, BOS, scored half and error estimate.

use std::path::PathBuf;

use engine::perplexity::{perplexity, PerplexityParams};
use engine::{Model, ModelParams};
use serde_json::Value;

#[path = "models/tiny_model.rs"]
mod tiny_model;

/// Checks the perplexity of fixture `name` with batches of `n_batch` tokens; returns it.
fn check(name: &str, n_batch: usize) -> f64 {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let fixtures = root.join("../../shared/fixtures");
    let fx: Value =
        serde_json::from_slice(&std::fs::read(root.join(format!("tests/data/logits/{name}.json"))).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model_name = fx["model"].as_str().unwrap();
    let path = match model_name.strip_prefix("shared:") {
        Some(rel) => fixtures.join(rel),
        None => {
            let p = dir.path().join("model.gguf");
            tiny_model::write(tiny_model::spec(model_name), &fixtures, &p);
            p
        }
    };
    let model = Model::load(&path, &ModelParams::default()).unwrap();
    let meta = model.metadata();
    let bos = meta
        .get_u64("tokenizer.ggml.bos_token_id")
        .unwrap()
        .map(|b| b as u32);
    let add_bos = meta
        .get_bool("tokenizer.ggml.add_bos_token")
        .unwrap()
        .unwrap_or(false);
    let tokens: Vec<u32> = fx["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let n_ctx = fx["n_ctx"].as_u64().unwrap() as usize;
    let params = PerplexityParams {
        n_ctx,
        n_batch,
        bos: bos.filter(|_| add_bos),
        n_threads: 2,
    };
    let mut running = Vec::new();
    let p = perplexity(&model, &tokens, &params, |p| running.push(p.ppl)).unwrap();
    let (want, want_err) = (fx["ppl"].as_f64().unwrap(), fx["ppl_error"].as_f64().unwrap());
    println!(
        "{name}: ours {:.4} +/- {:.4}, llama.cpp {want:.4} +/- {want_err:.4}",
        p.ppl, p.error
    );
    assert_eq!(p.tokens as u64, fx["scored"].as_u64().unwrap());
    assert_eq!(p.chunks, tokens.len() / n_ctx);
    assert_eq!(running.len(), p.chunks);
    assert!(
        (p.ppl / want - 1.0).abs() < 1e-3,
        "{name}: ppl {} vs {want}",
        p.ppl
    );
    assert!(
        (p.error / want_err - 1.0).abs() < 1e-2,
        "{name}: error {} vs {want_err}",
        p.error
    );
    p.ppl
}

#[test]
fn llama_f16_perplexity_matches_llama_cpp() {
    check("ppl-tiny-llama-f16", 512);
}

#[test]
fn gemma3_f16_perplexity_matches_llama_cpp() {
    check("ppl-tiny-gemma3-f16", 512);
}

/// Past the window of Gemma 3's windowed layers (4 in the tiny model, 16-token chunks), the same
/// bits whatever the batch size: the windowed pool (window + one batch of cells) wraps, and its
/// cells must still be added up in the order of their positions. With cells reused in place,
/// the real 270M model's perplexity at 1024 tokens went 26.10 / 26.20 / 25.95 / 26.06 for
/// batches of 512 / 256 / 128 / 1.
#[test]
fn gemma3_perplexity_does_not_depend_on_the_batch_size() {
    let ppl = [512, 16, 5, 3, 1].map(|b| check("ppl-tiny-gemma3-f16", b));
    assert!(ppl.iter().all(|p| p.to_bits() == ppl[0].to_bits()), "{ppl:?}");
}

#[test]
fn too_few_tokens_is_an_error() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/tiny/tiny-llama-spm-e64-f32.gguf");
    let model = Model::load(path, &ModelParams::default()).unwrap();
    let params = PerplexityParams {
        n_ctx: 16,
        n_batch: 16,
        bos: Some(1),
        n_threads: 1,
    };
    assert!(perplexity(&model, &[5; 31], &params, |_| {}).is_err());
}
