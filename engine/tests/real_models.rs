//! The two small real models against llama.cpp's answers recorded in `tests/data/real/`
//! (`scripts/measure-real-models.py`): perplexity on a few KB of English within 1%, greedy
//! continuations equal to llama.cpp's, and generation past the context.
//!
//! The models come from `OLLAMARS_TEST_GEMMA` / `OLLAMARS_TEST_QWEN`, or are fetched with
//! `scripts/fetch-model.sh` when those are unset (never skipped).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine::generate::{argmax, generate_greedy, GenerateParams};
use engine::perplexity::{perplexity, PerplexityParams};
use engine::tokenizer::Vocab;
use engine::{Batch, Context, ContextParams, Model, ModelParams};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn model_path(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let out = std::process::Command::new(root().join("../scripts/fetch-model.sh"))
        .arg(name)
        .output()
        .expect("running scripts/fetch-model.sh");
    assert!(
        out.status.success(),
        "fetch-model.sh {name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

struct Real {
    model: Arc<Model>,
    vocab: Vocab,
    reference: Value,
}

fn load(env: &str, name: &str) -> Real {
    let model = Model::load(model_path(env, name), &ModelParams::default()).unwrap();
    let vocab = Vocab::from_metadata(model.metadata()).unwrap();
    let reference: Value =
        serde_json::from_slice(&std::fs::read(root().join(format!("tests/data/real/{name}.json"))).unwrap())
            .unwrap();
    Real {
        model,
        vocab,
        reference,
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

fn check_perplexity(r: &Real) {
    let p = &r.reference["perplexity"];
    let text = std::fs::read_to_string(root().join("..").join(p["file"].as_str().unwrap())).unwrap();
    let tokens = r.vocab.tokenize(&text, true, false);
    assert_eq!(
        tokens.len() as u64,
        p["n_tokens"].as_u64().unwrap(),
        "tokenization differs from llama.cpp's"
    );
    let params = PerplexityParams {
        n_ctx: p["n_ctx"].as_u64().unwrap() as usize,
        n_batch: 512,
        bos: r.vocab.bos().filter(|_| r.vocab.add_bos()),
        n_threads: 2,
    };
    let ours = perplexity(&r.model, &tokens, &params, |_| {}).unwrap();
    let theirs = p["ppl"].as_f64().unwrap();
    println!(
        "{}: perplexity ours {:.4} +/- {:.4}, llama.cpp {theirs:.4} ({:+.3}%)",
        r.reference["model"],
        ours.ppl,
        ours.error,
        (ours.ppl / theirs - 1.0) * 100.0
    );
    assert_eq!(ours.tokens as u64, p["scored"].as_u64().unwrap());
    assert!(
        (ours.ppl / theirs - 1.0).abs() < 0.01,
        "ours {} vs llama.cpp {theirs}",
        ours.ppl
    );
}

/// Below this top-1/top-2 margin llama.cpp's own choice changes with its code path: its batched
/// and token-by-token evaluations of Gemma 3 270M differ by up to ~1 in single logits (mean KL
/// 4e-3), and ours differs from either by as much.
const NEAR_TIE: f64 = 0.5;

/// Teacher-forced: with llama.cpp's continuation as input, our most likely token at each step is
/// llama.cpp's wherever llama.cpp was not near a tie; then free-running greedy generation gives
/// llama.cpp's tokens up to its first near-tie.
fn check_greedy(r: &Real) {
    for g in r.reference["greedy"].as_array().unwrap() {
        let prompt = g["prompt"].as_str().unwrap();
        let parse_special = g["parse_special"].as_bool().unwrap();
        let prompt_tokens = ids(&g["prompt_tokens"]);
        assert_eq!(
            r.vocab.tokenize(prompt, true, parse_special),
            prompt_tokens,
            "tokens of {prompt:?}"
        );
        let theirs = ids(&g["tokens"]);
        let margins: Vec<f64> = g["margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap())
            .collect();

        let mut ctx = Context::new(
            r.model.clone(),
            ContextParams {
                n_ctx: 512,
                n_threads: 2,
                ..Default::default()
            },
        )
        .unwrap();
        let all: Vec<u32> = prompt_tokens.iter().chain(&theirs).copied().collect();
        let mut batch = Batch::new();
        for (i, &t) in all.iter().enumerate() {
            batch.add(t, i as i32, 0, i + 1 >= prompt_tokens.len());
        }
        ctx.decode(&batch).unwrap();
        let mut report = Vec::new();
        let mut agree = 0;
        for (k, (&t, &m)) in theirs.iter().zip(&margins).enumerate() {
            let ours = argmax(ctx.logits(prompt_tokens.len() - 1 + k).unwrap());
            report.push(format!("{}{:.2}", if ours == t { "=" } else { "!" }, m));
            agree += usize::from(ours == t);
            assert!(
                ours == t || m < NEAR_TIE,
                "{prompt:?}: step {k}: ours {ours}, llama.cpp {t} with margin {m}"
            );
        }
        println!(
            "{prompt:?} teacher-forced (= same top-1, with llama.cpp's margin): {}",
            report.join(" ")
        );
        assert!(
            agree * 10 >= theirs.len() * 9,
            "{prompt:?}: {agree} of {} steps agree",
            theirs.len()
        );

        let mut ctx = Context::new(
            r.model.clone(),
            ContextParams {
                n_ctx: 512,
                n_threads: 2,
                ..Default::default()
            },
        )
        .unwrap();
        let params = GenerateParams {
            n_predict: theirs.len(),
            n_keep: 4,
            seq: 0,
        };
        let ours = generate_greedy(&mut ctx, &prompt_tokens, &params, |t| !r.vocab.is_eog(t)).unwrap();
        let same = ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
        let first_tie = margins
            .iter()
            .position(|&m| m < NEAR_TIE)
            .unwrap_or(margins.len());
        println!(
            "{prompt:?} -> {:?} ({same} tokens as llama.cpp)",
            r.vocab.detokenize(&ours, false, false)
        );
        assert!(
            same >= first_tie,
            "{prompt:?}: {same} tokens as llama.cpp, its first near-tie is at {first_tie}"
        );
    }
}

/// A prompt longer than the context and a generation well past it: the context is shifted
/// (first tokens kept, half of the rest dropped, keys re-rotated) and the text stays fluent.
#[test]
fn gemma3_270m_generates_past_its_context() {
    let r = load("OLLAMARS_TEST_GEMMA", "gemma3-270m");
    let text = std::fs::read_to_string(root().join("tests/data/text/lighthouses.txt")).unwrap();
    let prompt: Vec<u32> = r
        .vocab
        .tokenize(&text, true, false)
        .into_iter()
        .take(150)
        .collect();
    let mut ctx = Context::new(
        r.model.clone(),
        ContextParams {
            n_ctx: 96,
            n_batch: 32,
            n_threads: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let params = GenerateParams {
        n_predict: 120,
        n_keep: 1,
        seq: 0,
    };
    let out = generate_greedy(&mut ctx, &prompt, &params, |_| true).unwrap();
    assert_eq!(out.len(), 120);
    assert!(ctx.seq_pos_max(0).unwrap() < 96);
    let text = r.vocab.detokenize(&out, true, false);
    println!("after a shifted 150-token prompt in a 96-token context: {text:?}");
    let words = text
        .split_whitespace()
        .filter(|w| w.chars().all(|c| c.is_alphabetic() || ",.;:'!?\"-".contains(c)));
    let n_words = text.split_whitespace().count();
    assert!(n_words >= 40, "{text:?}");
    assert!(words.count() * 10 >= n_words * 8, "mostly words: {text:?}");
}

#[test]
fn gemma3_270m_perplexity_matches_llama_cpp() {
    check_perplexity(&load("OLLAMARS_TEST_GEMMA", "gemma3-270m"));
}

#[test]
fn qwen25_coder_perplexity_matches_llama_cpp() {
    check_perplexity(&load("OLLAMARS_TEST_QWEN", "qwen25-coder-0.5b"));
}

#[test]
fn gemma3_270m_greedy_matches_llama_cpp() {
    check_greedy(&load("OLLAMARS_TEST_GEMMA", "gemma3-270m"));
}

#[test]
fn qwen25_coder_greedy_matches_llama_cpp() {
    check_greedy(&load("OLLAMARS_TEST_QWEN", "qwen25-coder-0.5b"));
}
