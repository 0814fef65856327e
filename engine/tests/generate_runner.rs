//! The serving loop (`engine::generate::runner`) on tiny models: continuous batching gives each
//! request the tokens it would get alone, prompt prefixes are reused, cancellation frees a slot
//! mid-prompt, the context shifts or ends the generation, stop strings cut the text, and
//! embeddings come from a second context, media markers show as nothing and end-of-turn tokens
//! stop.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use engine::chat::ReplyParser;
use engine::generate::runner::{
    truncate_prompt, Cancel, Command, EmbedRequest, Event, Request, Runner, RunnerHandle, RunnerParams,
    Summary,
};
use engine::generate::{generate_greedy, GenerateParams};
use engine::sample::{Sampler, SamplingOptions};
use engine::stop::{DoneReason, PredictLimit, StopMatcher};
use engine::tokenizer::Vocab;
use engine::{Batch, Context, ContextParams, Error, Model, ModelParams, TokenId};

#[path = "models/retoken.rs"]
mod retoken;
#[path = "models/tiny_model.rs"]
mod tiny_model;

use retoken::{retoken, NORMAL, USER_DEFINED};

fn tiny(name: &str) -> (Arc<Model>, Arc<Vocab>) {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/tiny")
        .join(name);
    let m = Model::load(p, &ModelParams::default()).unwrap();
    let v = Arc::new(Vocab::from_metadata(m.metadata()).unwrap());
    (m, v)
}

fn llama() -> (Arc<Model>, Arc<Vocab>) {
    tiny("tiny-llama-spm-e64-f32.gguf")
}

const PROMPT: [u32; 12] = [
    1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203,
];

/// What a request heard.
#[derive(Default, Debug)]
struct Heard {
    text: String,
    done: Option<Summary>,
    error: Option<String>,
    logprobs: usize,
}

fn request(m: &Model, prompt: &[u32], n: usize, stops: &[&str]) -> (Request, mpsc::Receiver<Event>, Cancel) {
    let (tx, rx) = mpsc::channel();
    let cancel = Cancel::new();
    let req = Request {
        prompt: prompt.to_vec(),
        sampler: Sampler::new(&SamplingOptions::greedy(), m.n_vocab(), 4096).unwrap(),
        limit: PredictLimit::Tokens(n),
        num_keep: 4,
        // The runner's own context decides (the tests vary it).
        n_ctx: usize::MAX,
        shift: true,
        stop: StopMatcher::new(stops),
        parser: ReplyParser::passthrough(),
        logprobs: None,
        cancel: cancel.clone(),
        sink: Box::new(move |e| tx.send(e).is_ok()),
    };
    (req, rx, cancel)
}

fn collect(rx: &mpsc::Receiver<Event>) -> Heard {
    let mut h = Heard::default();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Event::Output { delta, logprobs }) => {
                h.text.push_str(&delta.content);
                h.logprobs += logprobs.len();
            }
            Ok(Event::Done(s)) => {
                h.done = Some(s);
                return h;
            }
            Ok(Event::Error(e)) => {
                h.error = Some(e.to_string());
                return h;
            }
            Err(_) => return h,
        }
    }
}

/// The text of generated tokens, as a stream after a prompt shows it.
fn pieces(v: &Vocab, tokens: &[u32]) -> String {
    let bytes: Vec<u8> = tokens
        .iter()
        .flat_map(|&t| v.token_to_piece(t, false).to_vec())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn spawn(m: &Arc<Model>, v: &Arc<Vocab>, params: RunnerParams) -> RunnerHandle {
    Runner::new(m.clone(), v.clone(), params)
        .unwrap()
        .spawn("test-runner")
        .unwrap()
}

fn params(n_ctx: u32, n_slots: u32) -> RunnerParams {
    RunnerParams {
        n_ctx,
        n_slots,
        n_batch: 64,
        step_tokens: 64,
        n_threads: 2,
        ..RunnerParams::default()
    }
}

fn greedy_alone(m: &Arc<Model>, prompt: &[u32], n: usize) -> Vec<TokenId> {
    let mut c = Context::new(
        m.clone(),
        ContextParams {
            n_ctx: 256,
            n_batch: 64,
            n_threads: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let p = GenerateParams {
        n_predict: n,
        n_keep: 4,
        seq: 0,
    };
    generate_greedy(&mut c, prompt, &p, |_| true).unwrap()
}

#[test]
fn one_request_matches_plain_greedy_decoding() {
    let (m, v) = llama();
    let want = greedy_alone(&m, &PROMPT, 20);
    let r = spawn(&m, &v, params(256, 1));
    let (req, rx, _c) = request(&m, &PROMPT, 20, &[]);
    assert!(r.submit(Command::Generate(Box::new(req))).is_ok());
    let h = collect(&rx);
    let s = h.done.expect("done");
    assert_eq!(s.generated, want);
    assert_eq!(s.reason, DoneReason::Length);
    assert_eq!(s.prompt_tokens, PROMPT.len());
    assert_eq!(h.text, pieces(&v, &want));
}

#[test]
fn concurrent_requests_share_batches_and_match_their_solo_runs() {
    let (m, v) = llama();
    let prompts: Vec<Vec<u32>> = vec![
        PROMPT.to_vec(),
        PROMPT[..7].to_vec(),
        [&PROMPT[..3], &[4996, 4996, 17366]].concat(),
    ];
    let want: Vec<Vec<u32>> = prompts.iter().map(|p| greedy_alone(&m, p, 16)).collect();
    let r = spawn(&m, &v, params(128, 3));
    let rxs: Vec<_> = prompts
        .iter()
        .map(|p| {
            let (req, rx, c) = request(&m, p, 16, &[]);
            r.submit(Command::Generate(Box::new(req))).ok().unwrap();
            (rx, c)
        })
        .collect();
    let mut slots = Vec::new();
    for ((rx, _c), w) in rxs.iter().zip(&want) {
        let s = collect(rx).done.expect("done");
        assert_eq!(&s.generated, w);
        slots.push(s.slot);
    }
    slots.sort();
    slots.dedup();
    assert_eq!(slots.len(), 3, "each request had its own slot");
}

#[test]
fn more_requests_than_slots_wait_their_turn() {
    let (m, v) = llama();
    let want = greedy_alone(&m, &PROMPT, 8);
    let r = spawn(&m, &v, params(128, 2));
    let rxs: Vec<_> = (0..5)
        .map(|_| {
            let (req, rx, c) = request(&m, &PROMPT, 8, &[]);
            r.submit(Command::Generate(Box::new(req))).ok().unwrap();
            (rx, c)
        })
        .collect();
    for (rx, _c) in &rxs {
        assert_eq!(collect(rx).done.expect("done").generated, want);
    }
}

#[test]
fn a_continued_conversation_reuses_the_cached_prefix() {
    let (m, v) = llama();
    let r = spawn(&m, &v, params(256, 2));
    let (req, rx, _c) = request(&m, &PROMPT, 6, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let first = collect(&rx).done.unwrap();
    assert_eq!(first.cached_tokens, 0);
    // The next turn: the old prompt, the reply, and more text.
    let next: Vec<u32> = [&PROMPT[..], &first.generated, &[450, 4996]].concat();
    let want = greedy_alone(&m, &next, 6);
    let (req, rx, _c) = request(&m, &next, 6, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let second = collect(&rx).done.unwrap();
    assert_eq!(second.slot, first.slot);
    // Everything evaluated before (the last sampled token never was) is reused.
    assert_eq!(second.cached_tokens, PROMPT.len() + first.generated.len() - 1);
    assert_eq!(second.generated, want);
    // A different prompt with the same start reuses only the common part.
    let other: Vec<u32> = [&PROMPT[..5], &[278, 17366]].concat();
    let want = greedy_alone(&m, &other, 6);
    let (req, rx, _c) = request(&m, &other, 6, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let third = collect(&rx).done.unwrap();
    assert_eq!(third.generated, want);
    assert_eq!(third.cached_tokens, 5);
}

#[test]
fn an_identical_prompt_is_evaluated_again_for_its_last_token() {
    let (m, v) = llama();
    let r = spawn(&m, &v, params(256, 1));
    let want = greedy_alone(&m, &PROMPT, 5);
    for round in 0..2 {
        let (req, rx, _c) = request(&m, &PROMPT, 5, &[]);
        r.submit(Command::Generate(Box::new(req))).ok().unwrap();
        let s = collect(&rx).done.unwrap();
        assert_eq!(s.generated, want, "round {round}");
        assert_eq!(s.cached_tokens, if round == 0 { 0 } else { PROMPT.len() - 1 });
    }
}

#[test]
fn cancelling_mid_prompt_frees_the_slot() {
    let (m, v) = llama();
    // Tiny steps so that the long prompt takes many of them.
    let r = spawn(
        &m,
        &v,
        RunnerParams {
            step_tokens: 4,
            ..params(1024, 1)
        },
    );
    let long: Vec<u32> = PROMPT.iter().copied().cycle().take(900).collect();
    let (req, rx, cancel) = request(&m, &long, 1000, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    cancel.cancel();
    // The cancelled request hears nothing more; the slot serves the next one.
    let (req, rx2, _c) = request(&m, &PROMPT, 4, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let s = collect(&rx2).done.expect("second request served");
    assert_eq!(s.generated, greedy_alone(&m, &PROMPT, 4));
    assert!(rx.try_iter().all(|e| !matches!(e, Event::Done(_))));
    // A dropped receiver cancels too: the sink reports nobody listens.
    let (req, rx3, _c) = request(&m, &long, 1000, &[]);
    drop(rx3);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let (req, rx4, _c) = request(&m, &PROMPT, 4, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    assert!(collect(&rx4).done.is_some());
}

#[test]
fn a_full_context_shifts_or_ends_with_length() {
    let (m, v) = llama();
    let r = spawn(&m, &v, params(32, 1));
    let (req, rx, _c) = request(&m, &PROMPT, 60, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let s = collect(&rx).done.unwrap();
    assert_eq!(s.generated.len(), 60);
    assert!(s.context_shifts > 0);
    let (mut req, rx, _c) = request(&m, &PROMPT, 60, &[]);
    req.shift = false;
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let s = collect(&rx).done.unwrap();
    assert_eq!(s.reason, DoneReason::Length);
    assert_eq!(s.context_shifts, 0);
    assert_eq!(
        PROMPT.len() + s.generated.len(),
        32 + 1,
        "the context filled up, plus the last sampled token"
    );
    // num_predict -2: until the context is full.
    let (mut req, rx, _c) = request(&m, &PROMPT, 0, &[]);
    req.limit = PredictLimit::FillContext;
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let s = collect(&rx).done.unwrap();
    assert_eq!(s.reason, DoneReason::Length);
    assert_eq!(PROMPT.len() + s.generated.len(), 32);
}

#[test]
fn too_long_prompts_are_refused_and_truncation_makes_them_fit() {
    let (m, v) = llama();
    let r = spawn(&m, &v, params(32, 1));
    let mut long: Vec<u32> = PROMPT.iter().copied().cycle().take(50).collect();
    let (req, rx, _c) = request(&m, &long, 4, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    assert!(collect(&rx).error.unwrap().contains("50 tokens"));
    let dropped = truncate_prompt(&mut long, 32, 4);
    assert!(dropped > 0 && long.len() < 32);
    assert_eq!(&long[..4], &PROMPT[..4]);
    let (req, rx, _c) = request(&m, &long, 4, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    assert!(collect(&rx).done.is_some());
}

#[test]
fn truncation_keeps_the_start_and_the_end() {
    let mut t: Vec<u32> = (0..100).collect();
    assert_eq!(truncate_prompt(&mut t, 200, 4), 0);
    assert_eq!(t.len(), 100);
    let mut t: Vec<u32> = (0..100).collect();
    let dropped = truncate_prompt(&mut t, 40, 4);
    // n_left = 36, blocks of 18: (100 - 4 - 18) / 18 = 4 blocks erased.
    assert_eq!(dropped, 72);
    assert_eq!(t.len(), 28);
    assert_eq!(&t[..4], &[0, 1, 2, 3]);
    assert_eq!(*t.last().unwrap(), 99);
    let mut t: Vec<u32> = (0..40).collect();
    assert!(truncate_prompt(&mut t, 40, 100) > 0);
    assert!(t.len() < 40);
}

#[test]
fn stop_strings_end_the_text_before_them() {
    let (m, v) = llama();
    let want = greedy_alone(&m, &PROMPT, 30);
    let full = pieces(&v, &want);
    // Stop at a piece of the middle of the greedy text.
    let chars: Vec<char> = full.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let expect = &full[..full.find(&stop).unwrap()];
    let r = spawn(&m, &v, params(256, 1));
    let (req, rx, _c) = request(&m, &PROMPT, 30, &[&stop]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let h = collect(&rx);
    assert_eq!(h.text, expect);
    assert_eq!(h.done.unwrap().reason, DoneReason::Stop);
}

#[test]
fn logprobs_come_with_each_token() {
    let (m, v) = llama();
    let r = spawn(&m, &v, params(256, 1));
    let (mut req, rx, _c) = request(&m, &PROMPT, 7, &[]);
    req.logprobs = Some(3);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let mut n = 0;
    loop {
        match rx.recv().unwrap() {
            Event::Output { logprobs, .. } => {
                for lp in logprobs {
                    assert_eq!(lp.top.len(), 3);
                    assert_eq!(lp.top[0].token, lp.token, "greedy picks the most likely");
                    assert!(lp.logprob <= 0.0);
                    n += 1;
                }
            }
            Event::Done(s) => {
                assert_eq!(n, s.generated.len());
                break;
            }
            Event::Error(e) => panic!("{e}"),
        }
    }
}

/// An embedding request's inputs, evaluated several per pass (and a long one alone, in
/// micro-batches), each get the bits of a decode of that input alone; an empty or too long input
/// fails the request before any work.
#[test]
fn embeddings_match_a_direct_decode() {
    let (m, v) = llama();
    let r = spawn(&m, &v, params(128, 1));
    let embed = |inputs: Vec<Vec<u32>>| {
        let (tx, rx) = mpsc::channel();
        r.submit(Command::Embed(EmbedRequest {
            inputs,
            cancel: Cancel::new(),
            reply: Box::new(move |res| tx.send(res).unwrap()),
        }))
        .ok()
        .unwrap();
        rx.recv().unwrap()
    };
    // 40 inputs of 1 to 12 tokens (a batch of 64 takes 5 to 16 of them), then one of 100 tokens
    // (two micro-batches) between two short ones.
    let mut inputs: Vec<Vec<u32>> = (0..40).map(|i| PROMPT[..1 + i % 12].to_vec()).collect();
    let long: Vec<u32> = PROMPT.iter().cycle().take(100).copied().collect();
    inputs.splice(20..20, [long]);
    let got = embed(inputs.clone()).unwrap();
    assert_eq!(got.len(), inputs.len());
    for (i, (input, got)) in inputs.iter().zip(&got).enumerate() {
        let mut c = Context::new(
            m.clone(),
            ContextParams {
                n_ctx: 128,
                n_threads: 2,
                embeddings: true,
                ..Default::default()
            },
        )
        .unwrap();
        c.decode(&Batch::from_tokens(input, 0, 0)).unwrap();
        let want = c.embeddings(0).unwrap();
        assert!(
            got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
            "input {i} ({} tokens)",
            input.len()
        );
    }
    assert!(got[0] != got[1]);
    for bad in [vec![], vec![5; 129]] {
        let err = embed(vec![PROMPT.to_vec(), bad]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}

#[test]
fn sliding_window_slots_restart_when_their_window_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gemma3.gguf");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    tiny_model::write(tiny_model::spec("tiny-gemma3-f16"), &fixtures, &path);
    let m = Model::load(&path, &ModelParams::default()).unwrap();
    let v = Arc::new(Vocab::from_metadata(m.metadata()).unwrap());
    let prompt = tiny_model::prompt();
    // Small batches: the windowed layers' pool holds window + batch = 8 cells.
    let r = spawn(
        &m,
        &v,
        RunnerParams {
            n_batch: 4,
            step_tokens: 4,
            ..params(64, 1)
        },
    );
    let (req, rx, _c) = request(&m, &prompt, 20, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    collect(&rx).done.unwrap();
    // Same start, then different: the window no longer holds what the cut point needs.
    let other: Vec<u32> = [&prompt[..2], &prompt[..]].concat();
    let want = greedy_alone(&m, &other, 10);
    let (req, rx, _c) = request(&m, &other, 10, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let s = collect(&rx).done.unwrap();
    assert_eq!(s.cached_tokens, 0);
    assert_eq!(s.generated, want);
}

#[test]
fn an_aborted_runner_fails_what_it_holds() {
    let (m, v) = llama();
    let r = spawn(
        &m,
        &v,
        RunnerParams {
            step_tokens: 2,
            ..params(1024, 1)
        },
    );
    let long: Vec<u32> = PROMPT.iter().copied().cycle().take(900).collect();
    let (req, rx, _c) = request(&m, &long, 100, &[]);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    r.abort();
    let h = collect(&rx);
    assert!(h.error.is_some() || h.done.is_some());
}

/// A media marker the model generates (a user-defined token in the file, as Gemma 3's
/// `<start_of_image>` is) adds nothing to the reply, though logprobs still name it; a token
/// found by its text to end a turn stops the generation without showing.
#[test]
fn media_markers_show_as_nothing_and_end_of_turn_stops() {
    let (m, v) = llama();
    let ids = greedy_alone(&m, &PROMPT, 8);
    let marker = ids[1];
    // The end of turn: a later token that has not come before (so it ends the reply there).
    let end = (3..ids.len())
        .find(|&k| !ids[..k].contains(&ids[k]))
        .expect("a new token among the greedy ones");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("markers.gguf");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/tiny/tiny-llama-spm-e64-f32.gguf");
    retoken(
        &src,
        &path,
        &[
            (marker, "<start_of_image>", USER_DEFINED),
            (ids[end], "<end_of_turn>", NORMAL),
        ],
    );
    let m2 = Model::load(&path, &ModelParams::default()).unwrap();
    let v2 = Arc::new(Vocab::from_metadata(m2.metadata()).unwrap());

    // The token path: llama.cpp's piece keeps the user-defined text (and tokenizing still finds
    // it), the reply's piece is empty.
    assert_eq!(v2.token_to_piece(marker, false), b"<start_of_image>");
    assert_eq!(v2.output_piece(marker), b"");
    assert!(v2.tokenize("a<start_of_image>b", false, false).contains(&marker));
    assert!(v2.is_eog(ids[end]) && v2.output_piece(ids[end]).is_empty());
    assert_eq!(v2.output_piece(ids[0]), v2.token_to_piece(ids[0], false));

    // The serving loop.
    let r = spawn(&m2, &v2, params(256, 1));
    let (mut req, rx, _c) = request(&m2, &PROMPT, 8, &[]);
    req.logprobs = Some(0);
    r.submit(Command::Generate(Box::new(req))).ok().unwrap();
    let mut text = String::new();
    let mut named = Vec::new();
    let done = loop {
        match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
            Event::Output { delta, logprobs } => {
                text.push_str(&delta.content);
                named.extend(logprobs.into_iter().map(|lp| lp.bytes));
            }
            Event::Done(s) => break s,
            Event::Error(e) => panic!("{e}"),
        }
    };
    assert_eq!(done.reason, DoneReason::Stop);
    assert_eq!(done.generated, ids[..end]);
    let shown: Vec<u32> = ids[..end].iter().copied().filter(|&t| t != marker).collect();
    assert_eq!(text, pieces(&v, &shown));
    assert!(!text.contains("<start_of_image>"), "{text:?}");
    assert!(
        named.contains(&b"<start_of_image>".to_vec()),
        "logprobs name the marker"
    );
}
