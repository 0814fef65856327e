//! The serving loop: one [`Context`] with several slots (sequences), driven by continuous
//! batching, the way llama.cpp's server runs a model for many clients at once.
//!
//! A [`Runner`] owns the context on a dedicated OS thread and takes [`Command`]s from a channel.
//! Each step it gathers, for every busy slot, either the next chunk of its prompt or the token it
//! sampled last, into ONE [`Batch`], decodes it, and samples the next token of every slot whose
//! logits came out, each with its own [`Sampler`] (and grammar). Generated tokens become text
//! (held back at UTF-8 boundaries and at possible stop strings by [`StopMatcher`]), go through
//! the request's [`ReplyParser`] (thinking, tool calls) and are reported through the request's
//! sink as [`Event`]s.
//!
//! - Prompt-prefix reuse: a slot remembers the tokens its sequence holds. A new request goes to
//!   the free slot sharing the longest prefix with its prompt; only the rest is evaluated.
//! - Context shift: a sequence that fills its share of the context keeps its first `num_keep`
//!   tokens and drops half of the rest ([`Context::make_room`]), or ends with
//!   [`DoneReason::Length`] when the request does not allow shifting.
//! - Cancellation: a request's [`Cancel`] flag is checked before every step, so a cancelled
//!   request leaves within one step, including in the middle of a long prompt (evaluated a chunk
//!   of at most `step_tokens` tokens per step).
//! - Embeddings run on a second, lazily made context with pooled outputs, between steps.
//!
//! Nothing here blocks on anything but the command channel when idle; the caller decides how
//! many requests it lets queue (the runner takes all it is given and serves them in order).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::batch::Batch;
use crate::chat::{Phase, ReplyDelta, ReplyParser};
use crate::context::{Context, ContextParams};
use crate::kv::{KvType, Pos, SeqId};
use crate::model::Model;
use crate::sample::{token_logprobs, GrammarGate, Sampler};
use crate::stop::{DoneReason, PredictLimit, StopMatcher, StopStep};
use crate::tokenizer::Vocab;
use crate::{Error, Result, TokenId};

/// A flag a request's owner sets to stop it. Cloning shares the flag.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// A guard that cancels when dropped (tie it to whatever lives as long as the client).
    #[must_use]
    pub fn guard(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }
}

/// Cancels its [`Cancel`] when dropped.
#[derive(Debug)]
pub struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Where a request's events go. Returns `false` when nobody listens any more, which cancels the
/// request.
pub type EventSink = Box<dyn FnMut(Event) -> bool + Send>;

/// One generation to run.
pub struct Request {
    /// The prompt's tokens (already templated and tokenized); must not be empty and must fit in
    /// a slot's context (truncate first with [`truncate_prompt`]).
    pub prompt: Vec<TokenId>,
    pub sampler: Sampler,
    pub limit: PredictLimit,
    /// Tokens at the start that a context shift keeps.
    pub num_keep: usize,
    /// The request's context (its `num_ctx`); a slot with a larger one serves the request as a
    /// context of this size (the prompt's limit, shifts, the length limit), so that a reply
    /// does not depend on what the model happened to be loaded with.
    pub n_ctx: usize,
    /// Whether a full context is shifted (else the generation ends with `length`).
    pub shift: bool,
    pub stop: StopMatcher,
    pub parser: ReplyParser,
    /// Report the log-probability of each token and of this many alternatives.
    pub logprobs: Option<usize>,
    pub cancel: Cancel,
    pub sink: EventSink,
}

/// Receives the embeddings of an [`EmbedRequest`], in the order of its inputs.
pub type EmbedReply = Box<dyn FnOnce(Result<Vec<Vec<f32>>>) + Send>;

/// Embeddings of several inputs, one pooled vector each (not normalized).
pub struct EmbedRequest {
    pub inputs: Vec<Vec<TokenId>>,
    pub cancel: Cancel,
    pub reply: EmbedReply,
}

pub enum Command {
    Generate(Box<Request>),
    Embed(EmbedRequest),
}

/// What a request hears back.
#[derive(Debug)]
pub enum Event {
    /// More of the reply: text (split into thinking, content and tool calls) and, when asked
    /// for, the log-probabilities of the tokens that produced it.
    Output {
        delta: ReplyDelta,
        logprobs: Vec<TokenLogprob>,
    },
    /// The generation ended; always the last event of a successful request.
    Done(Summary),
    /// The request failed; the last event.
    Error(Error),
}

/// A generated token (or an alternative to it) with its log-probability.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenId,
    /// What the token adds to the text (control tokens as their text).
    pub bytes: Vec<u8>,
    pub logprob: f32,
    /// The most likely tokens at this position (empty unless alternatives were asked for).
    pub top: Vec<TokenLogprob>,
}

/// How a generation went.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub reason: DoneReason,
    /// The stop string that ended the generation, if one did.
    pub stop_sequence: Option<String>,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Of those, how many came from the slot's cache instead of being evaluated.
    pub cached_tokens: usize,
    /// From taking a slot to the first sampled token.
    pub prompt_duration: Duration,
    /// Tokens generated (including one that ended the generation at a stop string).
    pub generated: Vec<TokenId>,
    /// The generation ended on the model's end-of-generation token (sampled, but not in
    /// `generated`: it is no output).
    pub end_token: bool,
    /// Of those, the tokens of the reply's thinking, its tags included.
    pub thinking_tokens: usize,
    /// From the first sampled token to the end.
    pub eval_duration: Duration,
    /// How many times the context was shifted to make room.
    pub context_shifts: usize,
    /// Which slot served the request.
    pub slot: usize,
}

impl Summary {
    /// Tokens sampled, the end-of-generation token included: the eval count Ollama and
    /// llama.cpp report (`eval_count`, and the APIs' completion or output tokens).
    pub fn eval_count(&self) -> usize {
        self.generated.len() + usize::from(self.end_token)
    }
}

/// How a runner sets up its context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerParams {
    /// Context length of each slot.
    pub n_ctx: u32,
    /// Number of slots (parallel sequences).
    pub n_slots: u32,
    /// Micro-batch size of the context.
    pub n_batch: u32,
    /// Most tokens decoded in one step (prompt chunks share what generating slots leave); bounds
    /// how long a cancelled request can keep the runner busy.
    pub step_tokens: usize,
    pub kv_type: KvType,
    /// Worker threads (0: one per CPU).
    pub n_threads: usize,
}

impl Default for RunnerParams {
    fn default() -> Self {
        RunnerParams {
            n_ctx: 4096,
            n_slots: 1,
            n_batch: 512,
            step_tokens: 512,
            kv_type: KvType::F16,
            n_threads: 0,
        }
    }
}

/// llama.cpp server's truncation of a prompt that does not fit a context of `n_ctx`: keep the
/// first `n_keep` tokens, then drop whole blocks of half the remaining room from just after
/// them, so that the rest of the prompt (its end) fits with room left to generate. Returns the
/// number of tokens dropped (0 when the prompt fits).
pub fn truncate_prompt(tokens: &mut Vec<TokenId>, n_ctx: usize, n_keep: usize) -> usize {
    if tokens.len() < n_ctx || n_ctx < 2 {
        return 0;
    }
    let n_keep = n_keep.min(n_ctx / 2);
    let n_left = n_ctx - n_keep;
    let block = (n_left / 2).max(1);
    let erased = (tokens.len() - n_keep - block) / block * block;
    tokens.drain(n_keep..n_keep + erased);
    erased
}

/// A grammar (structured output, required tool calls) constrains the reply's content, not a
/// model's thinking, as Ollama lets a thinking model think before it applies the format: paused
/// inside the thinking; before the reply starts, the grammar's tokens or the opening tag. True
/// when the next token is free.
fn gate_grammar(a: &mut Active) -> bool {
    if a.req.sampler.grammar().is_none() {
        return false;
    }
    let gate = match a.req.parser.phase() {
        Phase::Thinking => GrammarGate::Paused,
        Phase::BeforeThinking => a.opener.map_or(GrammarGate::On, GrammarGate::OnOrExempt),
        Phase::Content => GrammarGate::On,
    };
    a.req.sampler.gate_grammar(gate);
    gate == GrammarGate::Paused
}

/// A handle to a runner thread.
pub struct RunnerHandle {
    tx: Sender<Command>,
    abort: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RunnerHandle {
    /// Hands a command to the runner; gives it back if the runner has stopped.
    pub fn submit(&self, cmd: Command) -> std::result::Result<(), Command> {
        self.tx.send(cmd).map_err(|e| e.0)
    }

    /// Stops the runner after the requests it has, and waits for it.
    pub fn shutdown(mut self) {
        self.join(false);
    }

    /// Stops the runner now: every request it holds ends with an error. Waits for it.
    pub fn abort(mut self) {
        self.join(true);
    }

    fn join(&mut self, abort: bool) {
        if abort {
            self.abort.store(true, Ordering::Relaxed);
        }
        // Wake a runner that waits for commands.
        let (tx, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RunnerHandle {
    fn drop(&mut self) {
        self.join(true);
    }
}

/// A slot: one sequence of the context and what it holds.
struct Slot {
    seq: SeqId,
    /// The tokens the sequence holds, at positions `0..tokens.len()`.
    tokens: Vec<TokenId>,
    /// How many of `tokens` a later request may reuse (tokens after a context shift may not: their
    /// keys were computed with text that is gone).
    reusable: usize,
    last_used: u64,
    busy: Option<Active>,
}

/// A request being served.
struct Active {
    req: Request,
    /// Index into `req.prompt` of the next prompt token to evaluate.
    next_prompt: usize,
    cached: usize,
    /// The token sampled last, not yet evaluated.
    pending: Option<TokenId>,
    /// Index of this slot's output in the current batch.
    output: Option<usize>,
    generated: Vec<TokenId>,
    /// It ended on the end-of-generation token.
    end_token: bool,
    thinking_tokens: usize,
    started: Instant,
    first_token: Option<Instant>,
    shifts: usize,
    /// The one token of a thinking model's opening tag, allowed besides a grammar before the
    /// reply starts (see [`gate_grammar`]).
    opener: Option<TokenId>,
}

pub struct Runner {
    model: Arc<Model>,
    vocab: Arc<Vocab>,
    ctx: Context,
    params: RunnerParams,
    slots: Vec<Slot>,
    queue: VecDeque<Request>,
    embeds: VecDeque<EmbedRequest>,
    embed_ctx: Option<Context>,
    batch: Batch,
    clock: u64,
}

impl Runner {
    /// A runner for `model` with `params.n_slots` slots of `params.n_ctx` tokens each.
    pub fn new(model: Arc<Model>, vocab: Arc<Vocab>, params: RunnerParams) -> Result<Runner> {
        if params.n_slots == 0 || params.step_tokens == 0 {
            return Err(Error::InvalidArgument(
                "a runner needs at least one slot and a positive step size".into(),
            ));
        }
        model.check_vocab(&vocab)?;
        let n_ctx = params
            .n_ctx
            .checked_mul(params.n_slots)
            .ok_or_else(|| Error::InvalidArgument("context too large".into()))?;
        let ctx = Context::new(
            model.clone(),
            ContextParams {
                n_ctx,
                n_batch: params.n_batch,
                n_seq_max: params.n_slots,
                kv_type: params.kv_type,
                n_threads: params.n_threads,
                embeddings: false,
                kv_unified: false,
            },
        )?;
        let slots = (0..params.n_slots)
            .map(|s| Slot {
                seq: s,
                tokens: Vec::new(),
                reusable: 0,
                last_used: 0,
                busy: None,
            })
            .collect();
        Ok(Runner {
            batch: Batch::with_capacity(params.step_tokens + params.n_slots as usize),
            model,
            vocab,
            ctx,
            params,
            slots,
            queue: VecDeque::new(),
            embeds: VecDeque::new(),
            embed_ctx: None,
            clock: 0,
        })
    }

    pub fn params(&self) -> &RunnerParams {
        &self.params
    }

    /// Bytes of the KV cache of the generation context.
    pub fn kv_size_bytes(&self) -> usize {
        self.ctx.kv_size_bytes()
    }

    /// Starts the runner on its own thread.
    pub fn spawn(self, name: &str) -> std::io::Result<RunnerHandle> {
        let (tx, rx) = mpsc::channel();
        let abort = Arc::new(AtomicBool::new(false));
        let flag = abort.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || self.run(rx, &flag))?;
        Ok(RunnerHandle {
            tx,
            abort,
            thread: Some(thread),
        })
    }

    /// Serves commands until the channel closes and the work in hand is done, or until `abort`
    /// is set.
    pub fn run(mut self, rx: Receiver<Command>, abort: &AtomicBool) {
        let mut open = true;
        loop {
            if open && self.is_idle() {
                match rx.recv() {
                    Ok(cmd) => self.accept(cmd),
                    Err(_) => open = false,
                }
            }
            while open {
                match rx.try_recv() {
                    Ok(cmd) => self.accept(cmd),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            if abort.load(Ordering::Relaxed) {
                self.fail_all("the model was unloaded");
                return;
            }
            if !open && self.is_idle() {
                return;
            }
            self.tick();
        }
    }

    /// Whether nothing is running or waiting.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.embeds.is_empty() && self.slots.iter().all(|s| s.busy.is_none())
    }

    /// Takes a command (served by later [`Runner::tick`]s).
    pub fn accept(&mut self, cmd: Command) {
        match cmd {
            Command::Generate(req) => self.queue.push_back(*req),
            Command::Embed(req) => self.embeds.push_back(req),
        }
    }

    /// One round of work: drops cancelled requests, gives free slots to waiting requests, runs
    /// one embedding request if any waits, and decodes one batch.
    pub fn tick(&mut self) {
        self.drop_cancelled();
        self.admit();
        if let Some(e) = self.embeds.pop_front() {
            self.embed(e);
        }
        if self.slots.iter().any(|s| s.busy.is_some()) {
            self.step();
        }
    }

    fn fail_all(&mut self, msg: &str) {
        for mut r in self.queue.drain(..) {
            (r.sink)(Event::Error(Error::Stopped(msg.to_string())));
        }
        for e in self.embeds.drain(..) {
            (e.reply)(Err(Error::Stopped(msg.to_string())));
        }
        for s in &mut self.slots {
            if let Some(mut a) = s.busy.take() {
                (a.req.sink)(Event::Error(Error::Stopped(msg.to_string())));
            }
        }
    }

    fn drop_cancelled(&mut self) {
        self.queue.retain(|r| !r.cancel.is_cancelled());
        for s in &mut self.slots {
            if s.busy.as_ref().is_some_and(|a| a.req.cancel.is_cancelled()) {
                let a = s.busy.take().expect("busy");
                // What was evaluated stays valid for the next request.
                if a.shifts == 0 {
                    s.reusable = s.tokens.len();
                }
            }
        }
    }

    /// Gives free slots to waiting requests, in arrival order; each goes to the free slot that
    /// shares the longest prefix with its prompt (the least recently used on ties).
    fn admit(&mut self) {
        while !self.queue.is_empty() {
            let free: Vec<usize> = (0..self.slots.len())
                .filter(|&i| self.slots[i].busy.is_none())
                .collect();
            if free.is_empty() {
                return;
            }
            let mut req = self.queue.pop_front().expect("not empty");
            let n_ctx = self.window(&req);
            if req.prompt.is_empty() {
                (req.sink)(Event::Error(Error::InvalidArgument("empty prompt".into())));
                continue;
            }
            if req.prompt.len() > n_ctx {
                (req.sink)(Event::Error(Error::InvalidArgument(format!(
                    "the prompt has {} tokens, the context {n_ctx}",
                    req.prompt.len()
                ))));
                continue;
            }
            let best = *free
                .iter()
                .max_by_key(|&&i| {
                    let s = &self.slots[i];
                    (
                        common_prefix(&s.tokens[..s.reusable], &req.prompt),
                        std::cmp::Reverse(s.last_used),
                    )
                })
                .expect("a free slot");
            let n_swa = self.model.sliding_window();
            let slot = &mut self.slots[best];
            let mut keep = common_prefix(&slot.tokens[..slot.reusable], &req.prompt);
            // At least one prompt token is evaluated, for its logits.
            keep = keep.min(req.prompt.len() - 1);
            if keep < slot.tokens.len() {
                // Windowed layers forget old positions: cutting back behind what they still hold
                // means evaluating from the start.
                if let (Some(w), Some(min)) = (n_swa, self.ctx.seq_pos_min(slot.seq)) {
                    if min as i64 > (keep as i64 - w as i64 + 1).max(0) {
                        keep = 0;
                    }
                }
                self.ctx.seq_rm(Some(slot.seq), keep as Pos, -1);
                slot.tokens.truncate(keep);
            }
            slot.reusable = keep;
            self.clock += 1;
            slot.last_used = self.clock;
            req.sampler.accept_prompt(&req.prompt);
            let opener = match req.parser.thinking_open_tag() {
                Some(tag) if req.sampler.grammar().is_some() => {
                    match self.vocab.tokenize(tag, false, true)[..] {
                        [t] => Some(t),
                        _ => None,
                    }
                }
                _ => None,
            };
            slot.busy = Some(Active {
                opener,
                next_prompt: keep,
                cached: keep,
                pending: None,
                output: None,
                generated: Vec::new(),
                end_token: false,
                thinking_tokens: 0,
                started: Instant::now(),
                first_token: None,
                shifts: 0,
                req,
            });
        }
    }

    /// The context a request runs in: its own, at most a slot's.
    fn window(&self, req: &Request) -> usize {
        req.n_ctx.min(self.ctx.n_ctx_seq() as usize)
    }

    /// Builds one batch from every busy slot, decodes it and samples.
    fn step(&mut self) {
        self.batch.clear();
        // Generating slots first: one token each, so that prompts never starve them.
        for i in 0..self.slots.len() {
            let Some(a) = self.slots[i].busy.as_ref() else {
                continue;
            };
            let Some(tok) = a.pending else {
                continue;
            };
            let n_ctx = self.window(&a.req);
            if self.slots[i].tokens.len() + 1 > n_ctx {
                if !a.req.shift {
                    self.finish(i, DoneReason::Length);
                    continue;
                }
                let n_keep = a.req.num_keep.min(n_ctx / 2);
                let seq = self.slots[i].seq;
                match self.ctx.make_room(seq, n_keep, 1, n_ctx) {
                    Ok(dropped) => {
                        let s = &mut self.slots[i];
                        s.tokens.drain(n_keep..n_keep + dropped);
                        s.reusable = s.reusable.min(n_keep);
                        s.busy.as_mut().expect("busy").shifts += 1;
                    }
                    Err(e) => {
                        self.fail(i, e);
                        continue;
                    }
                }
            }
            let s = &mut self.slots[i];
            let a = s.busy.as_mut().expect("busy");
            a.output = Some(self.batch.len());
            a.pending = None;
            self.batch.add(tok, s.tokens.len() as Pos, s.seq, true);
            s.tokens.push(tok);
        }
        // Then prompt chunks, in slot order, while the step has room.
        let mut budget = self.params.step_tokens.saturating_sub(self.batch.len());
        for s in &mut self.slots {
            let Some(a) = s.busy.as_mut() else { continue };
            if a.next_prompt >= a.req.prompt.len() || budget == 0 {
                continue;
            }
            let end = (a.next_prompt + budget).min(a.req.prompt.len());
            for k in a.next_prompt..end {
                let last = k + 1 == a.req.prompt.len();
                if last {
                    a.output = Some(self.batch.len());
                }
                self.batch
                    .add(a.req.prompt[k], s.tokens.len() as Pos, s.seq, last);
                s.tokens.push(a.req.prompt[k]);
            }
            budget -= end - a.next_prompt;
            a.next_prompt = end;
        }
        if self.batch.is_empty() {
            return;
        }
        if let Err(e) = self.ctx.decode(&self.batch) {
            // The sequences may hold part of the batch: start them over.
            let msg = e.to_string();
            for i in 0..self.slots.len() {
                let in_batch = self.batch.seqs().contains(&self.slots[i].seq);
                if in_batch && self.slots[i].busy.is_some() {
                    self.fail(i, Error::InvalidArgument(msg.clone()));
                }
            }
            return;
        }
        for i in 0..self.slots.len() {
            let Some(idx) = self.slots[i].busy.as_mut().and_then(|a| a.output.take()) else {
                continue;
            };
            self.sample(i, idx);
        }
    }

    /// Samples slot `i`'s next token from the logits of batch row `idx` and reports it.
    fn sample(&mut self, i: usize, idx: usize) {
        let n_ctx = self.window(&self.slots[i].busy.as_ref().expect("busy").req);
        let used = self.slots[i].tokens.len();
        let Some(logits) = self.ctx.logits(idx) else {
            self.fail(i, Error::InvalidArgument("no logits for the last token".into()));
            return;
        };
        let a = self.slots[i].busy.as_mut().expect("busy");
        if a.first_token.is_none() {
            a.first_token = Some(Instant::now());
        }
        if a.req.limit.reached(a.generated.len(), used, n_ctx) {
            self.finish(i, DoneReason::Length);
            return;
        }
        let paused = gate_grammar(a);
        let picked = a.req.sampler.sample(logits).and_then(|t| {
            a.req.sampler.accept(t)?;
            Ok(t)
        });
        let tok = match picked {
            Ok(t) => t,
            Err(e) => {
                self.fail(i, e);
                return;
            }
        };
        let mut logprobs = Vec::new();
        if let Some(n) = a.req.logprobs {
            match token_logprobs(logits, tok, n) {
                Ok(lp) => logprobs.push(TokenLogprob {
                    token: tok,
                    bytes: self.vocab.token_to_piece(tok, true).to_vec(),
                    logprob: lp.logprob,
                    top: lp
                        .top
                        .iter()
                        .map(|&(t, l)| TokenLogprob {
                            token: t,
                            bytes: self.vocab.token_to_piece(t, true).to_vec(),
                            logprob: l,
                            top: Vec::new(),
                        })
                        .collect(),
                }),
                Err(e) => {
                    self.fail(i, e);
                    return;
                }
            }
        }
        if self.vocab.is_eog(tok) {
            let a = self.slots[i].busy.as_mut().expect("busy");
            a.end_token = true;
            if !logprobs.is_empty() {
                let delta = ReplyDelta::default();
                if !(a.req.sink)(Event::Output { delta, logprobs }) {
                    a.req.cancel.cancel();
                }
            }
            self.finish(i, DoneReason::Stop);
            return;
        }
        let a = self.slots[i].busy.as_mut().expect("busy");
        a.generated.push(tok);
        let (text, stopped) = match a.req.stop.push(self.vocab.output_piece(tok)) {
            StopStep::Continue(t) => (t, false),
            StopStep::Stop(t) => (t, true),
        };
        let was_thinking = a.req.parser.phase() == Phase::Thinking;
        let delta = a.req.parser.push(&text);
        if was_thinking || a.req.parser.phase() == Phase::Thinking {
            a.thinking_tokens += 1;
        }
        if paused && a.req.parser.phase() == Phase::Content {
            // The thinking ended in this token: the grammar starts at the reply's first byte.
            let reply = a.req.parser.last_content().to_string();
            if let Err(e) = a.req.sampler.grammar_accept_text(&reply) {
                self.fail(i, e);
                return;
            }
        }
        if (!delta.is_empty() || !logprobs.is_empty()) && !(a.req.sink)(Event::Output { delta, logprobs }) {
            a.req.cancel.cancel();
        }
        if stopped {
            self.finish(i, DoneReason::Stop);
        } else if a.req.limit.reached(a.generated.len(), used + 1, n_ctx) {
            self.finish(i, DoneReason::Length);
        } else {
            a.pending = Some(tok);
        }
    }

    /// Ends slot `i`'s request: flushes held-back text and reports the summary.
    fn finish(&mut self, i: usize, reason: DoneReason) {
        let s = &mut self.slots[i];
        let Some(mut a) = s.busy.take() else { return };
        if a.shifts == 0 {
            s.reusable = s.tokens.len();
        }
        let rest = a.req.stop.finish();
        let mut delta = a.req.parser.push(&rest);
        delta.append(a.req.parser.finish());
        if !delta.is_empty() {
            (a.req.sink)(Event::Output {
                delta,
                logprobs: Vec::new(),
            });
        }
        let now = Instant::now();
        let first = a.first_token.unwrap_or(now);
        (a.req.sink)(Event::Done(Summary {
            reason,
            stop_sequence: a.req.stop.matched().map(str::to_owned),
            prompt_tokens: a.req.prompt.len(),
            cached_tokens: a.cached,
            prompt_duration: first - a.started,
            generated: a.generated,
            end_token: a.end_token,
            eval_duration: now - first,
            context_shifts: a.shifts,
            thinking_tokens: a.thinking_tokens,
            slot: i,
        }));
    }

    /// Ends slot `i`'s request with an error and empties its sequence.
    fn fail(&mut self, i: usize, e: Error) {
        let s = &mut self.slots[i];
        if let Some(mut a) = s.busy.take() {
            (a.req.sink)(Event::Error(e));
        }
        self.ctx.seq_rm(Some(s.seq), 0, -1);
        s.tokens.clear();
        s.reusable = 0;
    }

    /// Runs one embedding request on the embedding context (made on first use).
    fn embed(&mut self, req: EmbedRequest) {
        let result = self.embed_inputs(&req.inputs, &req.cancel);
        (req.reply)(result);
    }

    /// Embeds the inputs, several per forward pass: inputs that fit one batch together go in as
    /// sequences of one batch (a sentence or a short chunk alone would be a pass of a few tokens,
    /// where the matrices' reads dominate), a longer one alone. No logits are computed. Every
    /// input gets the bits it gets alone (ARCHITECTURE.md, invariants).
    fn embed_inputs(&mut self, inputs: &[Vec<TokenId>], cancel: &Cancel) -> Result<Vec<Vec<f32>>> {
        let n_ctx = self.params.n_ctx as usize;
        for tokens in inputs {
            if tokens.is_empty() {
                return Err(Error::InvalidArgument("cannot embed an empty input".into()));
            }
            if tokens.len() > n_ctx {
                return Err(Error::InvalidArgument(format!(
                    "the input has {} tokens, the context {n_ctx}",
                    tokens.len()
                )));
            }
        }
        if self.embed_ctx.is_none() {
            self.embed_ctx = Some(Context::new(
                self.model.clone(),
                ContextParams {
                    n_ctx: self.params.n_ctx,
                    n_batch: self.params.n_batch,
                    n_seq_max: EMBED_SEQS.min(self.params.n_ctx),
                    kv_type: self.params.kv_type,
                    n_threads: self.params.n_threads,
                    embeddings: true,
                    kv_unified: true,
                },
            )?);
        }
        let ctx = self.embed_ctx.as_mut().expect("made above");
        let (n_seq, n_batch) = (ctx.params().n_seq_max as usize, ctx.n_batch() as usize);
        let mut out = Vec::with_capacity(inputs.len());
        let mut batch = Batch::new();
        let mut first = 0;
        while first < inputs.len() {
            if cancel.is_cancelled() {
                return Err(Error::InvalidArgument("cancelled".into()));
            }
            // This input and the ones after it that fit the same batch.
            let mut end = first + 1;
            let mut total = inputs[first].len();
            while end < inputs.len() && end - first < n_seq && total + inputs[end].len() <= n_batch {
                total += inputs[end].len();
                end += 1;
            }
            batch.clear();
            for (seq, tokens) in inputs[first..end].iter().enumerate() {
                for (pos, &t) in tokens.iter().enumerate() {
                    batch.add(t, pos as Pos, seq as SeqId, false);
                }
            }
            ctx.clear();
            ctx.decode(&batch)?;
            for seq in 0..end - first {
                let e = ctx
                    .embeddings(seq as SeqId)
                    .ok_or_else(|| Error::InvalidArgument("no embedding computed".into()))?;
                out.push(e.to_vec());
            }
            first = end;
        }
        ctx.clear();
        Ok(out)
    }
}

/// Most inputs of an embedding request evaluated together, as sequences of one batch.
const EMBED_SEQS: u32 = 16;

fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
