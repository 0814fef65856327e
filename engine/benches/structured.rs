//! Structured output on the real Gemma 3 270M (262144-token vocabulary): tokens per second with
//! and without a JSON schema, the sampler's share of each token, and what a full token mask
//! costs at each step of a schema-constrained generation.
//!
//! Sampler and mask costs are thread CPU time; tokens per second are wall time.
//!
//! `cargo bench -p engine --bench structured` (the model path comes from `OLLAMARS_TEST_GEMMA`,
//! else `scripts/fetch-model.sh gemma3-270m` fetches it).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::grammar::{Grammar, Matcher, TokenMask, TokenVocab};
use engine::sample::{Sampler, SamplingOptions};
use engine::tokenizer::Vocab;
use engine::{Batch, Context, ContextParams, Model, ModelParams, TokenId};

/// CPU time of this thread: unlike wall time, not inflated when other processes share the cores.
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn gemma_path() -> PathBuf {
    if let Some(p) = std::env::var_os("OLLAMARS_TEST_GEMMA") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(root.join("scripts/fetch-model.sh"))
        .arg("gemma3-270m")
        .output()
        .expect("run scripts/fetch-model.sh");
    assert!(out.status.success(), "fetch-model.sh failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

struct Run {
    tokens: usize,
    total: Duration,
    sampling: Duration,
    full_masks: Vec<Duration>,
    text: String,
}

/// What every generation run shares.
struct Setup<'a> {
    model: &'a Arc<Model>,
    vocab: &'a Vocab,
    gvocab: &'a Arc<TokenVocab>,
    prompt: &'a [TokenId],
    n: usize,
}

fn generate(setup: &Setup, grammar: Option<&Grammar>, seed: i64, time_full_masks: bool) -> Run {
    let Setup {
        model,
        vocab,
        gvocab,
        prompt,
        n,
    } = *setup;
    let mut ctx = Context::new(
        Arc::clone(model),
        ContextParams {
            n_ctx: 1024,
            n_threads: 2,
            ..ContextParams::default()
        },
    )
    .unwrap();
    let opts = SamplingOptions {
        seed,
        ..SamplingOptions::default()
    };
    let mut s = Sampler::new(&opts, vocab.n_tokens(), 1024).unwrap();
    let mut probe = None;
    if let Some(g) = grammar {
        s = s
            .with_grammar(Matcher::new(g, Arc::clone(gvocab)).unwrap())
            .unwrap();
        probe = Some(Matcher::new(g, Arc::clone(gvocab)).unwrap());
    }
    let mut mask = TokenMask::new(vocab.n_tokens());
    ctx.decode(&Batch::from_tokens(prompt, 0, 0)).unwrap();
    let mut idx = prompt.len() - 1;
    let mut pos = prompt.len();
    let mut out = Vec::new();
    let mut sampling = Duration::ZERO;
    let mut full_masks = Vec::new();
    let start = Instant::now();
    while out.len() < n {
        let logits = ctx.logits(idx).unwrap();
        if time_full_masks {
            if let Some(p) = probe.as_mut() {
                let t = cpu_now();
                p.fill_mask(&mut mask);
                full_masks.push(cpu_now() - t);
            }
        }
        let t = cpu_now();
        let tok = s.sample(logits).unwrap();
        s.accept(tok).unwrap();
        sampling += cpu_now() - t;
        if let Some(p) = probe.as_mut() {
            p.accept(tok).unwrap();
        }
        if vocab.is_eog(tok) {
            break;
        }
        out.push(tok);
        ctx.decode(&Batch::from_tokens(&[tok], pos as i32, 0)).unwrap();
        idx = 0;
        pos += 1;
    }
    Run {
        tokens: out.len(),
        total: start.elapsed(),
        sampling,
        full_masks,
        text: vocab.detokenize(&out, false, false),
    }
}

fn report(name: &str, runs: &[Run]) {
    let tokens: usize = runs.iter().map(|r| r.tokens).sum();
    let total: Duration = runs.iter().map(|r| r.total).sum();
    let sampling: Duration = runs.iter().map(|r| r.sampling).sum();
    println!(
        "{name:<28} {tokens:>5} tokens  {:>6.1} tokens/s  sampling {:>7.1} us/token ({:.1}% of the time)",
        tokens as f64 / total.as_secs_f64(),
        sampling.as_secs_f64() * 1e6 / tokens.max(1) as f64,
        100.0 * sampling.as_secs_f64() / total.as_secs_f64()
    );
}

fn main() {
    let path = gemma_path();
    let gguf = engine::gguf::Gguf::open(&path).unwrap();
    let vocab = Vocab::from_metadata(gguf.metadata()).unwrap();
    let t = Instant::now();
    let gvocab = Arc::new(TokenVocab::from_vocab(&vocab));
    println!(
        "grammar vocabulary: {} tokens, {} trie nodes, built in {:.0} ms",
        gvocab.n_tokens(),
        gvocab.trie_nodes(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "email": {"type": "string"},
            "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}, "country": {"enum": ["US", "UK", "FR", "DE", "other"]}},
                "required": ["city", "country"]
            },
            "employed": {"type": "boolean"}
        },
        "required": ["name", "age", "hobbies", "address", "employed"]
    });
    let g_schema = Grammar::from_json_schema(&schema).unwrap();
    let g_json = Grammar::json();

    masks_along_a_document(&vocab, &gvocab, &g_schema);

    let model = match Model::load(&path, &ModelParams::default()) {
        Ok(m) => m,
        Err(e) => {
            println!("(no generation runs: the model does not load yet: {e})");
            return;
        }
    };
    let prompt_text = "<start_of_turn>user\nDescribe a fictional person as a JSON object with their name, age, email, hobbies, address and whether they are employed.<end_of_turn>\n<start_of_turn>model\n";
    let prompt = vocab.tokenize(prompt_text, true, true);
    let setup = Setup {
        model: &model,
        vocab: &vocab,
        gvocab: &gvocab,
        prompt: &prompt,
        n: 96,
    };
    let seeds = [1, 2, 3];

    // A B A B: the machine is shared and noisy.
    let mut plain = Vec::new();
    let mut schema_runs = Vec::new();
    let mut json_runs = Vec::new();
    for &seed in &seeds {
        plain.push(generate(&setup, None, seed, false));
        schema_runs.push(generate(&setup, Some(&g_schema), seed, false));
        json_runs.push(generate(&setup, Some(&g_json), seed, false));
    }
    report("no grammar", &plain);
    report("JSON schema", &schema_runs);
    report("format: json", &json_runs);
    println!("sample output with the schema: {}", schema_runs[0].text);

    // The full mask (every allowed token, what top_k = 0 needs) at each step of a generation.
    for (name, g) in [("JSON schema", &g_schema), ("format: json", &g_json)] {
        let r = generate(&setup, Some(g), 7, true);
        let mut m: Vec<f64> = r.full_masks.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        m.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mean = m.iter().sum::<f64>() / m.len() as f64;
        println!(
            "full mask, {name:<13} {} steps: mean {mean:.3} ms, median {:.3} ms, p90 {:.3} ms, max {:.3} ms (first step {:.3} ms)",
            m.len(),
            m[m.len() / 2],
            m[m.len() * 9 / 10],
            m[m.len() - 1],
            r.full_masks[0].as_secs_f64() * 1e3
        );
    }
}

/// Mask costs on the real vocabulary without the model: the grammar follows a JSON document
/// (tokenized as Gemma tokenizes it) token by token; at each step, the full mask and the
/// sampler's constrained pick (default options) over noisy logits in which the document's next
/// token is the most likely. Noise makes most of the other top candidates random tokens, which
/// a JSON grammar mostly rejects: a pessimistic case for the sampler's lazy checks.
fn masks_along_a_document(vocab: &Vocab, gvocab: &Arc<TokenVocab>, g: &Grammar) {
    let doc = r#"{"name": "Maria García", "age": 34, "hobbies": ["hiking", "oil painting", "chess"], "address": {"city": "Paris", "country": "FR", "street": "12 Rue de la Paix"}, "employed": true, "email": "maria.garcia@example.com"}"#;
    let tokens = vocab.tokenize(doc, false, false);
    let n = vocab.n_tokens();
    let mut probe = Matcher::new(g, Arc::clone(gvocab)).unwrap();
    let mut mask = TokenMask::new(n);
    let mut sampler = Sampler::new(
        &SamplingOptions {
            seed: 3,
            ..SamplingOptions::default()
        },
        n,
        4096,
    )
    .unwrap()
    .with_grammar(Matcher::new(g, Arc::clone(gvocab)).unwrap())
    .unwrap();
    let mut greedy = Sampler::new(&SamplingOptions::greedy(), n, 4096)
        .unwrap()
        .with_grammar(Matcher::new(g, Arc::clone(gvocab)).unwrap())
        .unwrap();
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut full = Vec::new();
    let mut lazy = Vec::new();
    let mut lazy_greedy = Vec::new();
    let mut allowed = Vec::new();
    for &tok in &tokens {
        let mut logits: Vec<f32> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
            })
            .collect();
        logits[tok as usize] = 9.0;
        let t = cpu_now();
        probe.fill_mask(&mut mask);
        full.push((cpu_now() - t).as_secs_f64() * 1e3);
        allowed.push(mask.count());
        assert!(
            mask.contains(tok),
            "the document leaves the grammar at {:?}",
            vocab.token_bytes(tok)
        );
        let t = cpu_now();
        let _ = sampler.sample(&logits).unwrap();
        lazy.push((cpu_now() - t).as_secs_f64() * 1e3);
        let t = cpu_now();
        let picked = greedy.sample(&logits).unwrap();
        lazy_greedy.push((cpu_now() - t).as_secs_f64() * 1e3);
        assert_eq!(picked, tok);
        probe.accept(tok).unwrap();
        sampler.accept(tok).unwrap();
        greedy.accept(tok).unwrap();
    }
    let stats = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        format!(
            "mean {:.3} ms, median {:.3} ms, p90 {:.3} ms, max {:.3} ms",
            s.iter().sum::<f64>() / s.len() as f64,
            s[s.len() / 2],
            s[s.len() * 9 / 10],
            s[s.len() - 1]
        )
    };
    println!(
        "document of {} tokens through the schema grammar (allowed tokens per step: min {}, max {})",
        tokens.len(),
        allowed.iter().min().unwrap(),
        allowed.iter().max().unwrap()
    );
    println!("  full mask:                     {}", stats(&full));
    if std::env::var_os("STEPS").is_some() {
        for (i, &tok) in tokens.iter().enumerate() {
            println!(
                "    {:>3} {:>8} allowed {:>7.3} ms full, {:>7.3} ms sample  next {:?}",
                i,
                allowed[i],
                full[i],
                lazy[i],
                String::from_utf8_lossy(vocab.token_bytes(tok))
            );
        }
    }
    println!("  constrained sample, defaults:  {}", stats(&lazy));
    println!("  constrained sample, greedy:    {}", stats(&lazy_greedy));
}
