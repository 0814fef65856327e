//! Structured output on the real Gemma 3 270M (262k-token vocabulary), through the serving loop
//! the daemon uses (`generate::runner`, continuous batching over several slots):
//!
//! - 50 sampled generations (Ollama's default options, one seed each) under 10 varied JSON
//!   schemas (nested objects, enums, const, arrays with bounds, anyOf, `$ref`/`$defs`, patterns,
//!   optional properties): every output ends by the grammar's choice (not the token limit), parses
//!   and validates against its schema (checked by the independent `jsonschema` crate);
//! - 50 generations with `format: "json"` (Ollama's default options, one seed each): every output
//!   that ends by the grammar's choice is one JSON object, and at most `JSON_MAX_AT_LIMIT` run
//!   into the token limit (the model's looping rate, measured against llama.cpp's);
//! - greedy and seeded constrained generation give the same tokens on every run, with 1 and with
//!   2 threads.
//!
//! The model comes from `OLLAMARS_TEST_GEMMA`, or is fetched with `scripts/fetch-model.sh` when
//! that is unset (never skipped). Schemas keep strings short and numbers bounded so that every
//! output closes within `NUM_PREDICT` tokens, which keeps the test to seconds.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::Arc;

use engine::chat::ReplyParser;
use engine::generate::runner::{Cancel, Command, Event, Request, Runner, RunnerParams};
use engine::grammar::{Grammar, Matcher, TokenVocab};
use engine::sample::{Sampler, SamplingOptions};
use engine::stop::{DoneReason, PredictLimit, StopMatcher};
use engine::tokenizer::Vocab;
use engine::{Model, ModelParams, TokenId};
use serde_json::{json, Value};

const NUM_PREDICT: usize = 160;
const JSON_NUM_PREDICT: usize = NUM_PREDICT;
/// How many of the 50 `format: "json"` generations may run into `JSON_NUM_PREDICT`. The JSON
/// grammar lets an object go on forever, and this pretrained 270M model sometimes keeps adding a
/// sentence to a "description" (sampled at temperature 0.8): llama.cpp itself does so in 5 of 350
/// such generations (1.4%; llama-cpp-python 0.3.36, its JSON grammar, the same prompts and
/// options, seeds 1000-1349), and which of ours do depends on the last bits of the logits (a seed
/// that closes here loops when the batch around it differs). So the test bounds the share (more
/// than 3 of 50 at llama.cpp's rate: under 1%) instead of pinning the luck of one seed; an object
/// that never closes would fail it at once.
const JSON_MAX_AT_LIMIT: usize = 3;
const N_CTX: u32 = 256;

fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("OLLAMARS_TEST_GEMMA") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("../scripts/fetch-model.sh"))
        .arg("gemma3-270m")
        .output()
        .expect("running scripts/fetch-model.sh");
    assert!(
        out.status.success(),
        "fetch-model.sh gemma3-270m failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

struct Gemma {
    model: Arc<Model>,
    vocab: Arc<Vocab>,
    gvocab: Arc<TokenVocab>,
}

fn gemma() -> Gemma {
    let model = Model::load(model_path(), &ModelParams::default()).unwrap();
    let vocab = Arc::new(Vocab::from_metadata(model.metadata()).unwrap());
    let gvocab = Arc::new(TokenVocab::from_vocab(&vocab));
    Gemma { model, vocab, gvocab }
}

/// A user turn in Gemma 3's chat format, ready for the model's reply.
fn prompt(g: &Gemma, user: &str) -> Vec<TokenId> {
    let text = format!("<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n");
    g.vocab.tokenize(&text, true, true)
}

/// A `format: "json"` prompt as users of a pretrained model write one: a worked example, then
/// the question. This Gemma 3 270M is not instruction-tuned (its GGUF has no chat template):
/// asked in chat turns for "a JSON object", it writes an object that imitates a config file and
/// keeps adding keys (42 of 50 ran past 160 tokens); with an example, it answers in kind.
fn json_prompt(g: &Gemma, subject: &str) -> Vec<TokenId> {
    let ask = |what: &str| format!("Q: Describe {what} as JSON with the keys \"name\" and \"kind\".\nA:\n");
    let text = format!(
        "{}{{\"name\": \"Rex\", \"kind\": \"animal\"}}\n{}",
        ask("a dog"),
        ask(subject)
    );
    g.vocab.tokenize(&text, true, true)
}

/// Varied schemas whose every instance is short: bounded strings, bounded integers, bounded arrays.
fn schemas() -> Vec<Value> {
    let name = json!({"type": "string", "minLength": 1, "maxLength": 16});
    vec![
        json!({"type": "object", "properties": {
            "name": name, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["name", "age"]}),
        json!({"type": "object", "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "size": {"type": "string", "enum": ["small", "medium", "large"]}},
            "required": ["color", "size"], "additionalProperties": false}),
        json!({"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                     "minItems": 1, "maxItems": 3}},
            "required": ["tags"]}),
        json!({"type": "object", "properties": {
            "address": {"type": "object", "properties": {
                "city": name, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"]}},
            "required": ["address"]}),
        json!({"type": "object", "properties": {
            "kind": {"const": "point"},
            "x": {"type": "integer", "minimum": -99, "maximum": 99},
            "y": {"type": "integer", "minimum": -99, "maximum": 99}},
            "required": ["kind", "x", "y"]}),
        json!({"type": "object", "properties": {
            "value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 999},
                                {"type": "string", "maxLength": 8}, {"type": "boolean"}]}},
            "required": ["value"]}),
        json!({"$defs": {"point": {"type": "object", "properties": {
                "x": {"type": "integer", "minimum": 0, "maximum": 9},
                "y": {"type": "integer", "minimum": 0, "maximum": 9}},
                "required": ["x", "y"], "additionalProperties": false}},
            "type": "object", "properties": {
                "from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
            "required": ["from", "to"]}),
        json!({"type": "object", "properties": {
            "items": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {
                "name": {"type": "string", "maxLength": 12},
                "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["name", "qty"]}}},
            "required": ["items"]}),
        json!({"type": "object", "properties": {
            "title": name,
            "done": {"type": "boolean"},
            "note": {"type": ["string", "null"], "maxLength": 12}},
            "required": ["title", "done"], "additionalProperties": false}),
        json!({"type": "object", "properties": {
            "shape": {"oneOf": [
                {"type": "object", "properties": {"circle": {"type": "integer", "minimum": 1, "maximum": 50}},
                 "required": ["circle"], "additionalProperties": false},
                {"type": "object", "properties": {"square": {"type": "integer", "minimum": 1, "maximum": 50}},
                 "required": ["square"], "additionalProperties": false}]},
            "date": {"type": "string", "format": "date"}},
            "required": ["shape", "date"]}),
    ]
}

const SUBJECTS: [&str; 5] = [
    "a cat",
    "the city of Paris",
    "a red car",
    "a shopping list",
    "a birthday party",
];

struct Outcome {
    text: String,
    reason: DoneReason,
    tokens: Vec<TokenId>,
}

/// Runs every (prompt, sampler) on one runner with several slots; outcomes in input order.
///
/// Every request is queued before the runner's first step, so which requests share a batch and
/// which KV cells each one gets are the same on every run. The bits should not depend on either
/// (ARCHITECTURE.md, invariants), but a test of grammars should not depend on that invariant.
fn run_all(g: &Gemma, jobs: Vec<(Vec<TokenId>, Sampler, usize)>, n_threads: usize) -> Vec<Outcome> {
    let runner = Runner::new(
        g.model.clone(),
        g.vocab.clone(),
        RunnerParams {
            n_ctx: N_CTX,
            n_slots: 8,
            n_threads,
            ..RunnerParams::default()
        },
    )
    .unwrap();
    let (commands, queued) = mpsc::channel();
    let (tx, rx) = mpsc::channel();
    let n = jobs.len();
    for (i, (prompt, sampler, num_predict)) in jobs.into_iter().enumerate() {
        let tx = tx.clone();
        let req = Request {
            prompt,
            sampler,
            limit: PredictLimit::Tokens(num_predict),
            num_keep: 4,
            n_ctx: N_CTX as usize,
            shift: false,
            stop: StopMatcher::new(Vec::<String>::new()),
            parser: ReplyParser::passthrough(),
            logprobs: None,
            cancel: Cancel::new(),
            sink: Box::new(move |e| tx.send((i, e)).is_ok()),
        };
        commands.send(Command::Generate(Box::new(req))).unwrap();
    }
    drop(commands);
    drop(tx);
    let runner = std::thread::spawn(move || runner.run(queued, &AtomicBool::new(false)));
    let mut texts = vec![String::new(); n];
    let mut out: Vec<Option<Outcome>> = (0..n).map(|_| None).collect();
    for (i, e) in rx {
        match e {
            Event::Output { delta, .. } => texts[i].push_str(&delta.content),
            Event::Done(s) => {
                out[i] = Some(Outcome {
                    text: std::mem::take(&mut texts[i]),
                    reason: s.reason,
                    tokens: s.generated,
                })
            }
            Event::Error(e) => panic!("generation {i} failed: {e}"),
        }
    }
    runner.join().unwrap();
    out.into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|| panic!("generation {i} never finished")))
        .collect()
}

fn constrained(g: &Gemma, grammar: &Grammar, opts: &SamplingOptions) -> Sampler {
    Sampler::new(opts, g.vocab.n_tokens(), N_CTX as usize)
        .unwrap()
        .with_grammar(Matcher::new(grammar, g.gvocab.clone()).unwrap())
        .unwrap()
}

#[test]
fn gemma3_270m_follows_json_schemas_and_json_format() {
    let g = gemma();
    let schemas = schemas();
    let mut jobs = Vec::new();
    let mut expected = Vec::new();
    for (si, schema) in schemas.iter().enumerate() {
        let grammar = Grammar::from_json_schema(schema).unwrap_or_else(|e| panic!("{schema}: {e}"));
        for (k, subject) in SUBJECTS.iter().enumerate() {
            let opts = SamplingOptions {
                seed: (si * SUBJECTS.len() + k) as i64,
                ..SamplingOptions::default()
            };
            let p = prompt(&g, &format!("Describe {subject} as a short JSON object."));
            jobs.push((p, constrained(&g, &grammar, &opts), NUM_PREDICT));
            expected.push(Some(schema));
        }
    }
    let json_grammar = Grammar::json();
    for i in 0..50 {
        let opts = SamplingOptions {
            seed: 1000 + i as i64,
            ..SamplingOptions::default()
        };
        let p = json_prompt(&g, SUBJECTS[i % SUBJECTS.len()]);
        jobs.push((p, constrained(&g, &json_grammar, &opts), JSON_NUM_PREDICT));
        expected.push(None);
    }
    let started = std::time::Instant::now();
    let outcomes = run_all(&g, jobs, 2);
    let generated: usize = outcomes.iter().map(|o| o.tokens.len()).sum();
    eprintln!(
        "{} generations, {generated} tokens in {:.1?}",
        outcomes.len(),
        started.elapsed()
    );
    let mut failures = Vec::new();
    let mut json_at_limit = Vec::new();
    for (o, schema) in outcomes.iter().zip(expected) {
        let what = match schema {
            Some(s) => format!("schema {s}"),
            None => "format json".to_string(),
        };
        if o.reason != DoneReason::Stop {
            if schema.is_none() {
                json_at_limit.push(o.text.clone());
            } else {
                failures.push(format!("{what}: ran into the token limit: {:?}", o.text));
            }
            continue;
        }
        let value: Value = match serde_json::from_str(&o.text) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{what}: {:?} is not JSON: {e}", o.text));
                continue;
            }
        };
        match schema {
            Some(schema) => {
                let validator = jsonschema::options()
                    .should_validate_formats(true)
                    .build(schema)
                    .unwrap();
                if let Err(e) = validator.validate(&value) {
                    failures.push(format!("{what}: {} does not validate: {e}", o.text));
                }
            }
            None if !value.is_object() => failures.push(format!("{what}: {} is not an object", o.text)),
            None => {}
        }
    }
    // Every token of a generation that ran into the limit was still allowed by the grammar: what
    // it wrote must be the start of a JSON object.
    for text in &json_at_limit {
        if !text.trim_start().starts_with('{') {
            failures.push(format!("format json: {text:?} does not start an object"));
        }
    }
    eprintln!(
        "format json: {} of 50 ran into the token limit",
        json_at_limit.len()
    );
    if json_at_limit.len() > JSON_MAX_AT_LIMIT {
        failures.push(format!(
            "format json: {} of 50 ran into the token limit (at most {JSON_MAX_AT_LIMIT}):\n{}",
            json_at_limit.len(),
            json_at_limit.join("\n")
        ));
    }
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        outcomes.len(),
        failures.join("\n")
    );
}

#[test]
fn gemma3_270m_constrained_output_is_the_same_at_any_thread_count() {
    let g = gemma();
    let schemas = schemas();
    let jobs = || {
        let mut jobs = Vec::new();
        for (si, schema) in schemas.iter().enumerate().step_by(5) {
            let grammar = Grammar::from_json_schema(schema).unwrap();
            let p = prompt(
                &g,
                &format!("Describe {} as a short JSON object.", SUBJECTS[si % 5]),
            );
            jobs.push((
                p.clone(),
                constrained(&g, &grammar, &SamplingOptions::greedy()),
                NUM_PREDICT,
            ));
            let seeded = SamplingOptions {
                seed: 7 + si as i64,
                temperature: 1.0,
                ..SamplingOptions::default()
            };
            jobs.push((p, constrained(&g, &grammar, &seeded), NUM_PREDICT));
        }
        jobs
    };
    let tokens = |o: Vec<Outcome>| o.into_iter().map(|o| (o.tokens, o.text)).collect::<Vec<_>>();
    let first = tokens(run_all(&g, jobs(), 1));
    let again = tokens(run_all(&g, jobs(), 1));
    let two = tokens(run_all(&g, jobs(), 2));
    assert_eq!(first, again, "a second run differs");
    assert_eq!(first, two, "2 threads differ from 1");
    for (toks, text) in &first {
        assert!(!toks.is_empty());
        serde_json::from_str::<Value>(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    }
}
