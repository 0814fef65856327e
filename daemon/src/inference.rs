//! Generation requests from the wire to the engine and back: finding and loading the model,
//! rendering and tokenizing the prompt (fitting it into the context, or saying it does not
//! fit), building the sampler, handing the request to the model's runner, and turning its
//! events into the response (a stream or one object).
//!
//! The wire formats (Ollama's NDJSON, OpenAI's SSE) are [`Encoder`]s over the same run.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use engine::chat::{Message, ReplyDelta, Think, Tool};
use engine::generate::runner::{
    truncate_prompt, Cancel, CancelOnDrop, Command, Event, Request, Summary, TokenLogprob,
};
use engine::sample::Sampler;
use engine::stop::{DoneReason, PredictLimit, StopMatcher};
use engine::template::{ChatFormat, PromptRequest};
use engine::TokenId;
use futures_util::stream;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use crate::error::{ApiError, ApiResult};
use crate::keep_alive::KeepAlive;
use crate::options::Options;
use crate::scheduler::{Lease, Loaded, Want};
use crate::server::AppState;
use crate::structured;
use crate::util::{rfc3339, tool_call_id};

/// A model from the store, ready to be scheduled.
pub struct StoreModel {
    pub model: registry::Model,
    /// The name as the request spelled it (what responses echo).
    pub requested: String,
    pub want: Want,
}

/// Finds a model in the store; 404 `model 'x' not found` when it is not there.
pub async fn find_model(state: &AppState, name: &str) -> ApiResult<StoreModel> {
    let parsed = registry::Name::parse(name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let store = state.store.clone();
    let model = tokio::task::spawn_blocking(move || registry::Model::load(&store, &parsed))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| {
            if e.is_not_found() {
                ApiError::not_found(format!("model '{name}' not found"))
            } else {
                ApiError::from(e)
            }
        })?;
    let Some(path) = model.model_path.clone() else {
        return Err(ApiError::bad_request(format!(
            "model '{name}' has no weights (no model layer)"
        )));
    };
    // A pulled model may carry an adapter layer; running it without would answer otherwise.
    if !model.adapters.is_empty() {
        return Err(ApiError::bad_request(format!(
            "model '{name}' has a LoRA adapter, which ollamars does not apply; merge it into the model (llama.cpp's llama-export-lora) and create the model from the merged GGUF"
        )));
    }
    let want = Want {
        path,
        name: model.name.display_shortest(),
        digest: model.manifest.digest.hex(),
        details: model.details(),
        num_ctx: None,
        keep_alive: None,
    };
    Ok(StoreModel {
        model,
        requested: name.to_string(),
        want,
    })
}

/// The model's parameters layer as JSON options.
pub fn model_options(m: &registry::Model) -> Option<Map<String, Value>> {
    match m.parameters.to_json() {
        Value::Object(o) if !o.is_empty() => Some(o),
        _ => None,
    }
}

/// Engine messages of the model's MESSAGE layer.
pub fn model_messages(m: &registry::Model) -> Vec<Message> {
    m.messages
        .iter()
        .map(|x| Message::new(x.role.clone(), x.content.clone()))
        .collect()
}

/// How a prompt was made to fit the context.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Truncation {
    /// Tokens of the prompt as rendered in full.
    pub original_tokens: usize,
    /// Oldest messages left out (chat).
    pub dropped_messages: usize,
    /// Tokens of `original_tokens` not sent: those of the dropped messages and those cut
    /// after the first `num_keep`.
    pub dropped_tokens: usize,
}

/// What a response needs besides the engine's events.
pub struct RunInfo {
    pub model: String,
    pub started: Instant,
    pub load_duration: Duration,
    pub prompt: Vec<TokenId>,
    pub truncation: Option<Truncation>,
    /// `/api/generate`: send `context` (not in raw mode).
    pub context: bool,
}

/// A generation handed to a runner.
pub struct Running {
    pub rx: mpsc::UnboundedReceiver<Event>,
    pub info: RunInfo,
    /// The loaded model's name, for `/metrics`.
    model: String,
    /// Whether the first generated token has been seen (for the time to first token).
    first_token_seen: bool,
    _cancel: CancelOnDrop,
    _permit: OwnedSemaphorePermit,
    _lease: Lease,
}

/// Everything a generation needs, before it is submitted.
pub struct Plan {
    pub lease: Lease,
    pub format: Option<Arc<ChatFormat>>,
    pub options: Options,
    pub tools: Vec<Tool>,
    /// The reply must be calls of these tools (see `ChatCall::required_tools`).
    pub required_tools: Option<Vec<Tool>>,
    pub think: Option<Think>,
    pub logprobs: Option<usize>,
    pub shift: bool,
    pub structured: Option<Value>,
    pub info: RunInfo,
}

pub fn engine_error(e: engine::Error) -> ApiError {
    match e.without_path() {
        engine::Error::InvalidArgument(m) => ApiError::bad_request(m.clone()),
        engine::Error::Stopped(_) => ApiError::unloaded(),
        engine::Error::Template(m) => ApiError::internal(format!("template: {m}")),
        other => ApiError::internal(other.to_string()),
    }
}

/// Tokenizes a rendered prompt as llama.cpp's server does (BOS where the vocabulary adds one,
/// special tokens written in the template parsed).
pub fn tokenize(loaded: &Loaded, text: &str) -> Vec<TokenId> {
    loaded.vocab.tokenize(text, true, true)
}

/// A chat rendered to fit the context.
pub struct Fitted {
    pub text: String,
    pub tokens: Vec<TokenId>,
    /// Tokens of the whole conversation as rendered before any message was dropped.
    pub original_tokens: usize,
    pub dropped_messages: usize,
}

/// Renders `msgs`, dropping the oldest non-system messages while the prompt does not fit (as
/// Ollama's `chatPrompt`), when `truncate`.
pub fn render_fitting(
    loaded: &Loaded,
    format: &ChatFormat,
    msgs: &[Message],
    tools: &[Tool],
    think: Option<&Think>,
    truncate: bool,
    n_ctx: usize,
) -> ApiResult<Fitted> {
    let render = |from: usize| -> ApiResult<(String, Vec<TokenId>)> {
        let mut kept: Vec<Message> = msgs[..from]
            .iter()
            .filter(|m| m.role == "system")
            .cloned()
            .collect();
        kept.extend_from_slice(&msgs[from..]);
        let text = format
            .render(&PromptRequest::chat(&kept, tools, think))
            .map_err(engine_error)?;
        let toks = tokenize(loaded, &text);
        Ok((text, toks))
    };
    let (text, tokens) = render(0)?;
    let original_tokens = tokens.len();
    if original_tokens <= n_ctx || !truncate || msgs.len() <= 1 {
        return Ok(Fitted {
            text,
            tokens,
            original_tokens,
            dropped_messages: 0,
        });
    }
    // Fewer messages never make a longer prompt: search the first start that fits.
    let last = msgs.len() - 1;
    let (mut lo, mut hi) = (1, last);
    let mut best = None;
    while lo <= hi {
        let mid = (lo + hi) / 2;
        let r = render(mid)?;
        if r.1.len() <= n_ctx {
            best = Some((mid, r));
            if mid == 0 {
                break;
            }
            hi = mid - 1;
        } else {
            lo = mid + 1;
        }
    }
    let (from, (text, tokens)) = match best {
        Some(b) => b,
        None => (last, render(last)?),
    };
    Ok(Fitted {
        text,
        tokens,
        original_tokens,
        dropped_messages: msgs[..from].iter().filter(|m| m.role != "system").count(),
    })
}

/// Fits the tokens into the context: cuts them (reporting it) when allowed, else a 400.
pub fn fit_tokens(
    tokens: &mut Vec<TokenId>,
    n_ctx: usize,
    num_keep: usize,
    truncate: bool,
    original: usize,
    dropped_messages: usize,
) -> ApiResult<Option<Truncation>> {
    if tokens.len() >= n_ctx && !truncate {
        return Err(ApiError::bad_request(format!(
            "the prompt is {} tokens, which does not fit the context length of {n_ctx} (num_ctx); raise num_ctx or allow truncation (\"truncate\": true)",
            tokens.len()
        )));
    }
    if dropped_messages > 0 && !truncate {
        unreachable!("messages are only dropped when truncating");
    }
    let cut = truncate_prompt(tokens, n_ctx, num_keep);
    if cut == 0 && dropped_messages == 0 {
        return Ok(None);
    }
    // Counted from the whole conversation, so that the dropped messages' tokens count too.
    Ok(Some(Truncation {
        original_tokens: original,
        dropped_messages,
        dropped_tokens: original.saturating_sub(tokens.len()),
    }))
}

/// Takes a slot and hands the request to the runner.
pub async fn start(plan: Plan, format_parser: Option<(&ChatFormat, &str)>) -> ApiResult<Running> {
    let Plan {
        lease,
        format,
        options,
        tools,
        required_tools,
        think,
        logprobs,
        shift,
        structured,
        info,
    } = plan;
    let loaded = lease.loaded.clone();
    // A required tool call decides the reply's shape; a structured format describes a text
    // reply, which there will not be (OpenAI accepts both; instructor sends both).
    let structured = structured.filter(|_| required_tools.is_none());
    let mut sampler = Sampler::new(&options.sampling, loaded.model.n_vocab(), lease.n_ctx as usize)
        .map_err(engine_error)?;
    if let Some(format) = &structured {
        sampler = structured::constrain(sampler, &loaded, format)?;
    }
    if let Some(required) = &required_tools {
        let format = format
            .as_deref()
            .ok_or_else(|| ApiError::internal("tool calls are required, but the model has no chat format"))?;
        sampler = structured::constrain_tool_calls(sampler, &loaded, format, required)?;
    }
    let limit = PredictLimit::from_num_predict(options.num_predict).map_err(engine_error)?;
    let parser = match format_parser {
        // A structured reply is the JSON the client asked for, never a call (the grammar leaves
        // no room for a marker, and bare JSON naming a tool is its answer).
        Some((f, prompt)) => {
            let parsed = if structured.is_some() { &[][..] } else { &tools[..] };
            f.reply_parser(prompt, think.as_ref(), parsed)
        }
        None => engine::chat::ReplyParser::passthrough(),
    };
    let permit = lease.slot().await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let cancel = Cancel::new();
    let req = Request {
        prompt: info.prompt.clone(),
        sampler,
        limit,
        num_keep: options.num_keep.max(0) as usize,
        n_ctx: lease.n_ctx as usize,
        shift,
        stop: StopMatcher::new(&options.stop),
        parser,
        logprobs,
        cancel: cancel.clone(),
        sink: Box::new(move |e| tx.send(e).is_ok()),
    };
    lease.submit(Command::Generate(Box::new(req)))?;
    Ok(Running {
        rx,
        info,
        model: loaded.name(),
        first_token_seen: false,
        _cancel: cancel.guard(),
        _permit: permit,
        _lease: lease,
    })
}

/// A wire format for a generation's events.
pub trait Encoder: Send + 'static {
    /// The content type of a streamed response.
    fn stream_content_type(&self) -> &'static str;
    /// Frames for more output.
    fn output(&mut self, delta: ReplyDelta, logprobs: Vec<TokenLogprob>, info: &RunInfo) -> Vec<String>;
    /// Frames for the end.
    fn done(&mut self, summary: &Summary, info: &RunInfo) -> Vec<String>;
    /// A frame for an error after the stream started.
    fn error(&mut self, msg: &str) -> String;
    /// The whole response as one JSON body (non-streaming).
    fn single(
        &mut self,
        all: ReplyDelta,
        logprobs: Vec<TokenLogprob>,
        summary: &Summary,
        info: &RunInfo,
    ) -> Value;
    /// An error before anything was sent.
    fn error_response(&self, e: ApiError) -> Response {
        e.into_response()
    }
}

fn truncation_headers(resp: &mut Response, truncation: Option<&Truncation>) {
    if let Some(t) = truncation {
        let h = resp.headers_mut();
        h.insert("x-ollamars-truncated", HeaderValue::from_static("true"));
        h.insert(
            "x-ollamars-prompt-tokens",
            HeaderValue::from(t.original_tokens as u64),
        );
        h.insert(
            "x-ollamars-dropped-tokens",
            HeaderValue::from(t.dropped_tokens as u64),
        );
        h.insert(
            "x-ollamars-dropped-messages",
            HeaderValue::from(t.dropped_messages as u64),
        );
    }
}

impl Running {
    /// Feeds `/metrics` with an event about to be sent.
    fn observe(&mut self, ev: &Event) {
        match ev {
            Event::Output { .. } => self.observe_output(),
            Event::Done(s) => self.observe_done(s),
            Event::Error(_) => {}
        }
    }

    /// Output is about to be sent: the first time, that is the first token's arrival.
    fn observe_output(&mut self) {
        if !self.first_token_seen {
            self.first_token_seen = true;
            crate::metrics::METRICS.record_first_token(&self.model, self.info.started.elapsed());
        }
    }

    /// The end. A generation whose tokens all went into held-back text (a stop string) sent
    /// its first token only now.
    fn observe_done(&mut self, s: &Summary) {
        if !s.generated.is_empty() {
            self.observe_output();
        }
        crate::metrics::METRICS.record_generation(&self.model, s);
    }
}

/// Turns a run into the response: a stream of frames, or one JSON object. An error before the
/// first output gets its own status code; after that, an error frame ends the stream.
pub async fn respond<E: Encoder>(mut run: Running, mut enc: E, streaming: bool) -> Response {
    if !streaming {
        let mut all = ReplyDelta::default();
        let mut lps = Vec::new();
        while let Some(ev) = run.rx.recv().await {
            match ev {
                Event::Output { delta, logprobs } => {
                    run.observe_output();
                    all.append(delta);
                    lps.extend(logprobs);
                }
                Event::Done(s) => {
                    run.observe_done(&s);
                    let body = enc.single(all, lps, &s, &run.info);
                    let mut resp = axum::Json(body).into_response();
                    truncation_headers(&mut resp, run.info.truncation.as_ref());
                    return resp;
                }
                Event::Error(e) => return enc.error_response(engine_error(e)),
            }
        }
        return enc.error_response(ApiError::internal("the generation ended without a result"));
    }
    // Wait for the first event: an early error is answered with a status code.
    let first = match run.rx.recv().await {
        Some(Event::Error(e)) => return enc.error_response(engine_error(e)),
        None => return enc.error_response(ApiError::internal("the generation ended without a result")),
        Some(ev) => ev,
    };
    let content_type = enc.stream_content_type();
    let truncation = run.info.truncation.clone();
    let mut head = Vec::new();
    run.observe(&first);
    let finished = frames(&mut enc, first, &run.info, &mut head);
    let state = (run, enc, finished);
    let body = stream::once(async move { Ok::<_, std::convert::Infallible>(head.concat()) });
    let rest = stream::unfold(state, |(mut run, mut enc, finished)| async move {
        if finished {
            return None;
        }
        let mut out = Vec::new();
        let fin = match run.rx.recv().await {
            Some(ev) => {
                run.observe(&ev);
                frames(&mut enc, ev, &run.info, &mut out)
            }
            None => {
                out.push(enc.error("the generation ended without a result"));
                true
            }
        };
        Some((Ok::<_, std::convert::Infallible>(out.concat()), (run, enc, fin)))
    });
    use futures_util::StreamExt;
    let mut resp = Response::new(Body::from_stream(body.chain(rest)));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    truncation_headers(&mut resp, truncation.as_ref());
    resp
}

/// Encodes one event; returns whether it ended the stream.
fn frames<E: Encoder>(enc: &mut E, ev: Event, info: &RunInfo, out: &mut Vec<String>) -> bool {
    match ev {
        Event::Output { delta, logprobs } => {
            out.extend(enc.output(delta, logprobs, info));
            false
        }
        Event::Done(s) => {
            out.extend(enc.done(&s, info));
            true
        }
        Event::Error(e) => {
            out.push(enc.error(&engine_error(e).message));
            true
        }
    }
}

/// Durations in nanoseconds, as Go marshals `time.Duration`.
fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// The metrics of a final chunk (zero values left out, as Go's `omitempty`).
pub fn metrics(obj: &mut Map<String, Value>, s: &Summary, info: &RunInfo) {
    let mut put = |k: &str, v: u64| {
        if v > 0 {
            obj.insert(k.into(), json!(v));
        }
    };
    put("total_duration", ns(info.started.elapsed()));
    put("load_duration", ns(info.load_duration));
    put("prompt_eval_count", s.prompt_tokens as u64);
    put("prompt_eval_duration", ns(s.prompt_duration));
    put("eval_count", s.eval_count() as u64);
    put("eval_duration", ns(s.eval_duration));
    if let Some(t) = &info.truncation {
        obj.insert("truncated".into(), json!(true));
        obj.insert("prompt_tokens_original".into(), json!(t.original_tokens));
        obj.insert("prompt_tokens_dropped".into(), json!(t.dropped_tokens));
        if t.dropped_messages > 0 {
            obj.insert("messages_dropped".into(), json!(t.dropped_messages));
        }
    }
    if s.context_shifts > 0 {
        obj.insert("context_shifts".into(), json!(s.context_shifts));
    }
}

/// Ollama's logprobs items.
pub fn logprobs_json(lps: &[TokenLogprob]) -> Value {
    let item = |t: &TokenLogprob| {
        json!({
            "token": String::from_utf8_lossy(&t.bytes),
            "logprob": t.logprob as f64,
            "bytes": t.bytes.iter().map(|&b| b as u32).collect::<Vec<_>>(),
        })
    };
    Value::Array(
        lps.iter()
            .map(|t| {
                let mut v = item(t);
                if !t.top.is_empty() {
                    v["top_logprobs"] = Value::Array(t.top.iter().map(item).collect());
                }
                v
            })
            .collect(),
    )
}

/// Ollama's tool calls, numbered from `first_index`.
pub fn tool_calls_json(calls: &[engine::chat::ToolCall], first_index: usize) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({
                    "id": c.id.clone().unwrap_or_else(tool_call_id),
                    "function": {"index": first_index + i, "name": c.name, "arguments": Value::Object(c.arguments.clone())},
                })
            })
            .collect(),
    )
}

fn now() -> String {
    rfc3339(SystemTime::now())
}

/// `/api/chat` as NDJSON.
#[derive(Default)]
pub struct ChatNdjson {
    calls: usize,
}

impl ChatNdjson {
    fn message(&mut self, d: &ReplyDelta) -> Value {
        let mut m = json!({"role": "assistant", "content": d.content});
        if !d.thinking.is_empty() {
            m["thinking"] = json!(d.thinking);
        }
        if !d.tool_calls.is_empty() {
            m["tool_calls"] = tool_calls_json(&d.tool_calls, self.calls);
            self.calls += d.tool_calls.len();
        }
        m
    }
}

fn line(v: &Value) -> String {
    let mut s = v.to_string();
    s.push('\n');
    s
}

impl Encoder for ChatNdjson {
    fn stream_content_type(&self) -> &'static str {
        "application/x-ndjson"
    }

    fn output(&mut self, delta: ReplyDelta, logprobs: Vec<TokenLogprob>, info: &RunInfo) -> Vec<String> {
        let mut v =
            json!({"model": info.model, "created_at": now(), "message": self.message(&delta), "done": false});
        if !logprobs.is_empty() {
            v["logprobs"] = logprobs_json(&logprobs);
        }
        vec![line(&v)]
    }

    fn done(&mut self, s: &Summary, info: &RunInfo) -> Vec<String> {
        let mut v = json!({"model": info.model, "created_at": now(),
            "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": s.reason.as_str()});
        metrics(v.as_object_mut().expect("object"), s, info);
        vec![line(&v)]
    }

    fn error(&mut self, msg: &str) -> String {
        line(&json!({ "error": msg }))
    }

    fn single(&mut self, all: ReplyDelta, logprobs: Vec<TokenLogprob>, s: &Summary, info: &RunInfo) -> Value {
        let mut v = json!({"model": info.model, "created_at": now(), "message": self.message(&all),
            "done": true, "done_reason": s.reason.as_str()});
        if !logprobs.is_empty() {
            v["logprobs"] = logprobs_json(&logprobs);
        }
        metrics(v.as_object_mut().expect("object"), s, info);
        v
    }
}

/// `/api/generate` as NDJSON.
pub struct GenerateNdjson;

impl GenerateNdjson {
    fn final_fields(v: &mut Value, s: &Summary, info: &RunInfo) {
        if info.context {
            let ctx: Vec<TokenId> = info.prompt.iter().chain(&s.generated).copied().collect();
            v["context"] = json!(ctx);
        }
        metrics(v.as_object_mut().expect("object"), s, info);
    }
}

impl Encoder for GenerateNdjson {
    fn stream_content_type(&self) -> &'static str {
        "application/x-ndjson"
    }

    fn output(&mut self, delta: ReplyDelta, logprobs: Vec<TokenLogprob>, info: &RunInfo) -> Vec<String> {
        let mut v =
            json!({"model": info.model, "created_at": now(), "response": delta.content, "done": false});
        if !delta.thinking.is_empty() {
            v["thinking"] = json!(delta.thinking);
        }
        if !logprobs.is_empty() {
            v["logprobs"] = logprobs_json(&logprobs);
        }
        vec![line(&v)]
    }

    fn done(&mut self, s: &Summary, info: &RunInfo) -> Vec<String> {
        let mut v = json!({"model": info.model, "created_at": now(), "response": "", "done": true,
            "done_reason": s.reason.as_str()});
        Self::final_fields(&mut v, s, info);
        vec![line(&v)]
    }

    fn error(&mut self, msg: &str) -> String {
        line(&json!({ "error": msg }))
    }

    fn single(&mut self, all: ReplyDelta, logprobs: Vec<TokenLogprob>, s: &Summary, info: &RunInfo) -> Value {
        let mut v = json!({"model": info.model, "created_at": now(), "response": all.content, "done": true,
            "done_reason": s.reason.as_str()});
        if !all.thinking.is_empty() {
            v["thinking"] = json!(all.thinking);
        }
        if !all.tool_calls.is_empty() {
            v["tool_calls"] = tool_calls_json(&all.tool_calls, 0);
        }
        if !logprobs.is_empty() {
            v["logprobs"] = logprobs_json(&logprobs);
        }
        Self::final_fields(&mut v, s, info);
        v
    }
}

/// The `load`/`unload` answers of an empty prompt.
pub fn load_answer(model: &str, reason: &str, chat: bool) -> Value {
    let mut v = json!({"model": model, "created_at": now(), "done": true, "done_reason": reason});
    if chat {
        v["message"] = json!({"role": "assistant", "content": ""});
    } else {
        v["response"] = json!("");
    }
    v
}

/// A request with nothing to generate (a load, an unload) answered in an encoder's form: the
/// end of a generation of no tokens, streamed or whole. OpenAI's endpoints answer so, where
/// Ollama's own send `done_reason` `load` or `unload`, so that OpenAI clients always get their
/// own objects.
pub fn respond_empty<E: Encoder>(mut enc: E, model: &str, streaming: bool) -> Response {
    let info = RunInfo {
        model: model.to_string(),
        started: Instant::now(),
        load_duration: Duration::ZERO,
        prompt: Vec::new(),
        truncation: None,
        context: false,
    };
    let summary = Summary {
        reason: DoneReason::Stop,
        stop_sequence: None,
        prompt_tokens: 0,
        cached_tokens: 0,
        prompt_duration: Duration::ZERO,
        generated: Vec::new(),
        end_token: false,
        eval_duration: Duration::ZERO,
        context_shifts: 0,
        thinking_tokens: 0,
        slot: 0,
    };
    if !streaming {
        return axum::Json(enc.single(ReplyDelta::default(), Vec::new(), &summary, &info)).into_response();
    }
    let mut resp = Response::new(Body::from(enc.done(&summary, &info).concat()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(enc.stream_content_type()),
    );
    resp
}

/// Checks a request's images: ollamars runs text-only models, so images are refused clearly.
pub fn check_images(model: &str, n_images: usize) -> ApiResult<()> {
    if n_images > 0 {
        return Err(ApiError::bad_request(format!(
            "\"{model}\" does not support images: it is a text-only model (ollamars runs no vision models yet)"
        )));
    }
    Ok(())
}

/// Whether `keep_alive` asks for an unload.
pub fn is_unload(k: Option<KeepAlive>) -> bool {
    k.is_some_and(|k| k.is_zero())
}

/// Fixtures for the encoders' tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use engine::chat::ToolCall;

    /// A generation of `generated` tokens after a 5-token prompt, 2 of them cached.
    pub fn summary(reason: DoneReason, generated: usize) -> Summary {
        Summary {
            reason,
            prompt_tokens: 5,
            stop_sequence: None,
            cached_tokens: 2,
            prompt_duration: Duration::ZERO,
            generated: vec![0; generated],
            end_token: false,
            eval_duration: Duration::ZERO,
            context_shifts: 0,
            thinking_tokens: 0,
            slot: 0,
        }
    }

    /// A run of model `m:latest` on a 5-token prompt.
    pub fn info() -> RunInfo {
        RunInfo {
            model: "m:latest".into(),
            started: Instant::now(),
            load_duration: Duration::ZERO,
            prompt: vec![1, 2, 3, 4, 5],
            truncation: None,
            context: false,
        }
    }

    /// A piece of a reply.
    pub fn delta(thinking: &str, content: &str, tool_calls: Vec<ToolCall>) -> ReplyDelta {
        ReplyDelta {
            thinking: thinking.into(),
            content: content.into(),
            tool_calls,
        }
    }

    /// A call of `weather` for Paris, with this id.
    pub fn weather_call(id: &str) -> ToolCall {
        ToolCall {
            id: Some(id.into()),
            name: "weather".into(),
            arguments: json!({"city": "Paris"}).as_object().unwrap().clone(),
        }
    }

    /// The events of `event: NAME` + `data: JSON` frames, checking that each names its `type`.
    pub fn typed_events(frames: &[String]) -> Vec<Value> {
        frames
            .concat()
            .split("\n\n")
            .filter(|f| !f.is_empty())
            .map(|f| {
                let (name, data) = f.split_once('\n').unwrap();
                let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(name.strip_prefix("event: ").unwrap(), v["type"], "{f}");
                v
            })
            .collect()
    }
}
