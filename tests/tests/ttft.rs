//! Time to first token through the daemon vs the engine alone (issue 7: within 5% + 1 ms), on
//! Gemma 3 270M. A benchmark, not in the default run:
//!
//! `cargo test --release -p ollamars-tests --test ttft -- --ignored --nocapture`
//!
//! (`OLLAMARS_TTFT_RUNS`, default 10, runs of each). Every run uses a different prompt of the
//! same length (the run number first), so neither side reuses a cached prefix, and each prompt
//! goes through both: the daemon (`ollamars serve`, one slot, the model loaded by a warm-up
//! request) timed by the client from sending a streaming raw `/api/generate` to the first chunk
//! with text; the engine in this process (same file, context size, batch, threads and sampler
//! options) from tokenizing to the first token's text. Runs alternate between the two so that
//! load on the machine hits both alike. Prints every run, the medians and their ratio.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use engine::sample::Sampler;
use engine::tokenizer::Vocab;
use engine::{Batch, Context, ContextParams, Model, ModelParams};
use ollamars_tests::{models, Daemon};
use serde_json::{json, Value};

const PROMPT: &str = "The history of astronomy is long and rich. Early civilizations watched the sky \
to keep calendars, to navigate and to predict the seasons. Babylonian astronomers recorded the \
motions of the planets, Greek philosophers proposed models of the cosmos, and later scholars \
refined them with careful observations. Explain in a few sentences why";

const N_CTX: u32 = 4096;
const N_BATCH: u32 = 512;

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// The engine alone: tokenize, decode the prompt, sample until a token shows text.
struct Engine {
    model: std::sync::Arc<Model>,
    vocab: Vocab,
    ctx: Context,
    options: daemon::options::Options,
    /// The prompt whose tokens the cache holds.
    cached: Vec<u32>,
}

impl Engine {
    fn new(path: &std::path::Path, request_options: &Value) -> Engine {
        let model = Model::load(path, &ModelParams::default()).unwrap();
        let vocab = Vocab::from_metadata(model.metadata()).unwrap();
        let ctx = Context::new(
            model.clone(),
            ContextParams {
                n_ctx: N_CTX,
                n_batch: N_BATCH,
                n_threads: 0,
                ..Default::default()
            },
        )
        .unwrap();
        let options = daemon::options::Options::resolve(None, request_options.as_object()).unwrap();
        Engine {
            model,
            vocab,
            ctx,
            options,
            cached: Vec::new(),
        }
    }

    /// Time to the first token with text, and that text. As the daemon's runner does, the
    /// tokens the previous prompt shares with this one (here the BOS) stay in the cache.
    fn first_text(&mut self, prompt: &str) -> (Duration, String) {
        let t0 = Instant::now();
        let mut sampler = Sampler::new(&self.options.sampling, self.model.n_vocab(), N_CTX as usize).unwrap();
        let tokens = self.vocab.tokenize(prompt, true, true);
        let keep = self
            .cached
            .iter()
            .zip(&tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len() - 1);
        self.ctx.seq_rm(Some(0), keep as i32, -1);
        sampler.accept_prompt(&tokens);
        let mut batch = Batch::from_tokens(&tokens[keep..], keep as i32, 0);
        self.cached = tokens.clone();
        let mut pos = tokens.len() as i32;
        loop {
            self.ctx.decode(&batch).unwrap();
            let logits = self.ctx.logits(batch.len() - 1).unwrap();
            let tok = sampler.sample(logits).unwrap();
            sampler.accept(tok).unwrap();
            let text = String::from_utf8_lossy(self.vocab.output_piece(tok)).into_owned();
            if !text.is_empty() || self.vocab.is_eog(tok) {
                return (t0.elapsed(), text);
            }
            batch = Batch::from_tokens(&[tok], pos, 0);
            pos += 1;
        }
    }
}

/// Through the daemon: from sending the request to the first streamed chunk with text.
fn daemon_first_text(d: &Daemon, prompt: &str, options: &Value) -> (Duration, String) {
    let body = json!({"model": "gemma", "prompt": prompt, "raw": true, "stream": true,
        "options": options});
    let t0 = Instant::now();
    let resp = d
        .client()
        .post(d.url("/api/generate"))
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut first = None;
    for line in BufReader::new(resp).lines() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let text = v["response"].as_str().unwrap_or_default();
        if first.is_none() && (!text.is_empty() || v["done"] == true) {
            first = Some((t0.elapsed(), text.to_string()));
        }
    }
    first.expect("a chunk")
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
fn ttft_daemon_vs_engine() {
    let runs: usize = std::env::var("OLLAMARS_TTFT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let gemma = models::gemma();
    // Greedy, and few tokens so each daemon request ends soon after its first token.
    let options = json!({"temperature": 0, "num_predict": 2, "num_ctx": N_CTX});
    let d = Daemon::builder().env("OLLAMARS_NUM_PARALLEL", "1").start();
    d.create_model("gemma", &gemma);
    let mut engine = Engine::new(&gemma, &options);
    // Warm both: the daemon loads the model, both touch the weights once.
    daemon_first_text(&d, "Warm up.", &options);
    engine.first_text("Warm up.");

    let n_prompt = engine.vocab.tokenize(PROMPT, true, true).len();
    println!(
        "Gemma 3 270M ({}), prompt of ~{n_prompt} tokens, {runs} runs each",
        gemma.display()
    );
    let (mut via_daemon, mut alone) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let prompt = format!("{i}. {PROMPT}");
        let (te, text_e) = engine.first_text(&prompt);
        let (td, text_d) = daemon_first_text(&d, &prompt, &options);
        assert_eq!(text_d, text_e, "the same first token both ways");
        println!(
            "run {i:>2}: daemon {:>8.2} ms  engine {:>8.2} ms  first token {text_d:?}",
            td.as_secs_f64() * 1e3,
            te.as_secs_f64() * 1e3
        );
        via_daemon.push(td);
        alone.push(te);
    }
    let md = median(&mut via_daemon);
    let me = median(&mut alone);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let budget = ms(me) * 1.05 + 1.0;
    println!(
        "median TTFT: daemon {:.2} ms, engine {:.2} ms, ratio {:.3}, overhead {:+.2} ms (budget: engine x 1.05 + 1 ms = {budget:.2} ms) -> {}",
        ms(md),
        ms(me),
        ms(md) / ms(me),
        ms(md) - ms(me),
        if ms(md) <= budget { "within" } else { "OVER" }
    );
}
