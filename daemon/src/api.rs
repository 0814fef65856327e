//! Ollama's inference endpoints: `/api/generate`, `/api/chat`, `/api/embed`, `/api/embeddings`.
//!
//! Each handler decodes its body, and hands the shared steps to [`crate::inference`]; the
//! OpenAI-compatible endpoints (`crate::openai`) call the same `prepare_*` functions.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use engine::chat::{chat_messages, generate_messages, Message, Think, Tool};
use engine::generate::runner::{Cancel, Command, EmbedRequest as EngineEmbed};
use engine::template::{ChatFormat, PromptRequest};
use engine::TokenId;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::inference::{
    check_images, engine_error, find_model, fit_tokens, is_unload, load_answer, model_messages,
    model_options, render_fitting, respond, respond_empty, start, tokenize, ChatNdjson, Encoder, Fitted,
    GenerateNdjson, Plan, RunInfo, Running, StoreModel,
};
use crate::options::Options;
use crate::scheduler::Lease;
use crate::server::AppState;
use crate::structured;
use crate::util::rfc3339;
use crate::wire::{
    check_top_logprobs, model_name, parse_body, parse_keep_alive, parse_think, tools, ChatRequest,
    CommonRequest, EmbedRequest, EmbeddingsRequest, GenerateRequest,
};

fn into_response(r: ApiResult<Response>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

fn engine_400(e: engine::Error) -> ApiError {
    ApiError::bad_request(e.without_path().to_string())
}

/// What a prepared generation turned into: a run, or an answer that needs no generation
/// (Ollama's JSON object: a load, an unload, a rendered prompt).
pub enum Prepared {
    Run(Box<Running>),
    Answer(Value),
}

impl Prepared {
    /// A compatibility endpoint's answer: the generation encoded by `enc` or, when there was
    /// nothing to generate (a load or an unload), `enc`'s empty reply, so its clients get their
    /// own shapes and never Ollama's native object.
    pub async fn respond_with<E: Encoder>(self, enc: E, streaming: bool) -> Response {
        match self {
            Prepared::Answer(v) => respond_empty(enc, v["model"].as_str().unwrap_or_default(), streaming),
            Prepared::Run(run) => respond(*run, enc, streaming).await,
        }
    }
}

/// What chat and generate requests share, in engine terms.
pub struct CallCommon {
    pub model: String,
    pub options: Option<serde_json::Map<String, Value>>,
    pub format: Option<Value>,
    pub keep_alive: Option<Value>,
    pub think: Option<Think>,
    pub truncate: Option<bool>,
    pub shift: Option<bool>,
    pub logprobs: Option<usize>,
    pub debug_render_only: bool,
    pub n_images: usize,
}

/// The shared fields of an `/api/chat` or `/api/generate` body in engine terms.
fn call_common(req: CommonRequest, n_images: usize) -> ApiResult<CallCommon> {
    let top = check_top_logprobs(req.top_logprobs)?;
    Ok(CallCommon {
        model: model_name(&req.model)?.to_string(),
        options: req.options,
        format: req.format,
        keep_alive: req.keep_alive,
        think: parse_think(req.think.as_ref())?,
        truncate: req.truncate,
        shift: req.shift,
        logprobs: req.logprobs.unwrap_or(false).then_some(top),
        debug_render_only: req.debug_render_only.unwrap_or(false),
        n_images,
    })
}

/// A chat request in engine terms (from `/api/chat` or `/v1/chat/completions`).
pub struct ChatCall {
    pub common: CallCommon,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    /// Tools the reply must call (OpenAI's `tool_choice`: all of `tools` for `"required"`, the
    /// named one for a function): decoding is constrained to calls of these. `None`: free.
    pub required_tools: Option<Vec<Tool>>,
}

/// The model, its prompt format, options and lease a generation starts from.
struct Ready {
    sm: StoreModel,
    format: Option<Arc<ChatFormat>>,
    think: Option<Think>,
    options: Options,
    structured: Option<Value>,
    lease: Lease,
}

/// What a request needs of the model's prompt format besides `think`.
#[derive(Clone, Copy, Default)]
struct Needs {
    tools: bool,
    insert: bool,
}

/// Checks that `format` can serve the request (tools, insert and `think`) and resolves `think`.
fn check_format(format: &ChatFormat, c: &CallCommon, needs: Needs) -> ApiResult<Option<Think>> {
    let caps = format.capabilities();
    let unsupported = |what: &str| ApiError::bad_request(format!("\"{}\" does not support {what}", c.model));
    if needs.tools && !caps.tools {
        return Err(unsupported("tools"));
    }
    if needs.insert && !caps.insert {
        return Err(unsupported("insert"));
    }
    format
        .resolve_think(c.think.clone())
        .map_err(|_| unsupported("thinking"))
}

/// The start every generation shares: find the model, answer an unload (`unload_asked`: the
/// request has nothing to generate), get the prompt format (`template`: the request's
/// template; `None` for a raw prompt, which has no format) and check what the request `needs`
/// of it, refuse images, resolve the options and format, then load (or reload) the model,
/// waiting in the queue if need be, and answer a load-only request (`load_only`). Everything
/// that can refuse the request runs before it waits: a refused request loads nothing and
/// evicts nothing. `Err` holds the answer when there is nothing to generate.
async fn prelude(
    st: &AppState,
    c: &CallCommon,
    chat: bool,
    unload_asked: bool,
    load_only: bool,
    template: Option<Option<&str>>,
    needs: Needs,
) -> ApiResult<Result<Ready, Value>> {
    let sm = find_model(st, &c.model).await?;
    let keep_alive = parse_keep_alive(c.keep_alive.as_ref())?;
    if unload_asked && is_unload(keep_alive) {
        st.sched.expire(&sm.want.path).await;
        return Ok(Err(load_answer(&c.model, "unload", chat)));
    }
    let (format, think) = match template {
        Some(t) => {
            let format = st
                .formats
                .get(&sm.want.path, sm.model.template.as_deref(), t)
                .await?;
            let think = check_format(&format, c, needs)?;
            (Some(format), think)
        }
        None => {
            // A raw prompt is the whole input, but as in Ollama the model must still be able to
            // do what the request asks: a suffix needs `insert` (and is then left out), `think`
            // a thinking model.
            if needs.insert || c.think.as_ref().is_some_and(Think::enabled) {
                let format = st
                    .formats
                    .get(&sm.want.path, sm.model.template.as_deref(), None)
                    .await?;
                check_format(&format, c, needs)?;
            }
            (None, None)
        }
    };
    check_images(&c.model, c.n_images)?;
    let options = Options::resolve(model_options(&sm.model).as_ref(), c.options.as_ref())
        .map_err(ApiError::bad_request)?;
    let structured = structured::requested(c.format.as_ref())?;
    let mut want = sm.want.clone();
    want.num_ctx = options.num_ctx;
    want.keep_alive = keep_alive;
    let lease = st.sched.acquire(&want).await?;
    if load_only {
        return Ok(Err(load_answer(&c.model, "load", chat)));
    }
    Ok(Ok(Ready {
        sm,
        format,
        think,
        options,
        structured,
        lease,
    }))
}

/// The answer of `_debug_render_only`: the rendered prompt and its length in tokens (before
/// any truncation), no generation.
fn rendered_answer(model: &str, chat: bool, text: &str, prompt_tokens: usize) -> Prepared {
    let mut v = json!({"model": model, "created_at": rfc3339(std::time::SystemTime::now()), "done": true,
        "_debug_info": {"rendered_template": text, "prompt_tokens": prompt_tokens}});
    if chat {
        v["message"] = json!({"role": "assistant", "content": ""});
    } else {
        v["response"] = json!("");
    }
    Prepared::Answer(v)
}

pub async fn prepare_chat(st: &AppState, call: ChatCall, started: Instant) -> ApiResult<Prepared> {
    let ChatCall {
        common: c,
        messages,
        tools,
        required_tools,
    } = call;
    let empty = messages.is_empty();
    let needs = Needs {
        tools: !tools.is_empty(),
        insert: false,
    };
    let Ready {
        sm,
        format,
        think,
        options,
        structured,
        lease,
    } = match prelude(st, &c, true, empty, empty, Some(None), needs).await? {
        Ok(ready) => ready,
        Err(answer) => return Ok(Prepared::Answer(answer)),
    };
    let Some(format) = format else {
        return Err(ApiError::internal("no prompt format for a chat"));
    };
    let loaded = lease.loaded.clone();
    let msgs = chat_messages(sm.model.system.as_deref(), &model_messages(&sm.model), &messages);
    let truncate = c.truncate.unwrap_or(true);
    let n_ctx = lease.n_ctx as usize;
    let Fitted {
        text,
        mut tokens,
        original_tokens,
        dropped_messages,
    } = {
        let (loaded, format, tools) = (loaded.clone(), format.clone(), tools.clone());
        let think = think.clone();
        tokio::task::spawn_blocking(move || {
            render_fitting(&loaded, &format, &msgs, &tools, think.as_ref(), truncate, n_ctx)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??
    };
    if c.debug_render_only {
        return Ok(rendered_answer(&c.model, true, &text, original_tokens));
    }
    let truncation = fit_tokens(
        &mut tokens,
        n_ctx,
        options.num_keep.max(0) as usize,
        truncate,
        original_tokens,
        dropped_messages,
    )?;
    if let Some(t) = &truncation {
        tracing::warn!(model = %c.model, original = t.original_tokens, dropped_messages = t.dropped_messages,
            dropped_tokens = t.dropped_tokens, n_ctx, "prompt truncated to fit the context");
    }
    let plan = Plan {
        info: RunInfo {
            model: c.model.clone(),
            started,
            load_duration: lease.load_duration,
            prompt: tokens,
            truncation,
            context: false,
        },
        lease,
        format: Some(format.clone()),
        options,
        tools,
        required_tools,
        think,
        logprobs: c.logprobs,
        shift: c.shift.unwrap_or(true),
        structured,
    };
    let running = start(plan, Some((&format, &text))).await?;
    Ok(Prepared::Run(Box::new(running)))
}

/// A `/api/chat` body in engine terms: what the handler runs before any model is touched.
fn chat_call(req: ChatRequest) -> ApiResult<ChatCall> {
    let wire_msgs = req.messages.unwrap_or_default();
    let n_images = wire_msgs
        .iter()
        .map(|m| m.images.as_ref().map_or(0, Vec::len))
        .sum();
    let common = call_common(req.common, n_images)?;
    let messages = wire_msgs
        .iter()
        .map(|m| m.to_engine())
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(ChatCall {
        common,
        messages,
        tools: tools(&req.tools),
        required_tools: None,
    })
}

/// Decodes an `/api/chat` body as the handler does, without a server (fuzz/).
#[doc(hidden)]
pub fn decode_chat(body: &[u8]) -> ApiResult<ChatCall> {
    chat_call(parse_body(body)?)
}

pub async fn chat(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let started = crate::metrics::arrival();
    into_response(
        async {
            let req: ChatRequest = parse_body(&body)?;
            let stream = req.common.stream;
            let call = chat_call(req)?;
            Ok(match prepare_chat(&st, call, started).await? {
                Prepared::Answer(v) => axum::Json(v).into_response(),
                Prepared::Run(run) => respond(*run, ChatNdjson::default(), stream.unwrap_or(true)).await,
            })
        }
        .await,
    )
}

/// A generate request in engine terms (from `/api/generate` or `/v1/completions`).
pub struct GenerateCall {
    pub common: CallCommon,
    pub prompt: String,
    pub suffix: String,
    pub system: Option<String>,
    pub template: Option<String>,
    pub context: Option<Vec<i64>>,
    pub raw: bool,
}

pub async fn prepare_generate(st: &AppState, g: GenerateCall, started: Instant) -> ApiResult<Prepared> {
    let c = &g.common;
    let non_empty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    // First, as Ollama checks it.
    if g.raw && (non_empty(&g.template) || non_empty(&g.system) || g.context.is_some()) {
        return Err(ApiError::bad_request(
            "raw mode does not support template, system, or context",
        ));
    }
    let load_only = g.prompt.is_empty() && g.suffix.is_empty();
    let template = (!g.raw).then_some(g.template.as_deref());
    let needs = Needs {
        tools: false,
        insert: !g.suffix.is_empty(),
    };
    let Ready {
        sm,
        format,
        think,
        options,
        structured,
        lease,
    } = match prelude(st, c, false, g.prompt.is_empty(), load_only, template, needs).await? {
        Ok(ready) => ready,
        Err(answer) => return Ok(Prepared::Answer(answer)),
    };
    let loaded = lease.loaded.clone();
    let n_ctx = lease.n_ctx as usize;
    // `context` (the tokens of an earlier exchange) goes in front of the new prompt as tokens,
    // never through text: a detokenize/tokenize round trip would change them (a second BOS, a
    // merged boundary) and miss the runner's cached prefix.
    let mut context_ids: Vec<TokenId> = Vec::new();
    let text = match &format {
        None => g.prompt.clone(),
        Some(format) => {
            if let Some(ctx) = &g.context {
                let n_vocab = loaded.vocab.n_tokens() as i64;
                let ids = ctx
                    .iter()
                    .map(|&t| {
                        if (0..n_vocab).contains(&t) {
                            Ok(t as u32)
                        } else {
                            Err(())
                        }
                    })
                    .collect::<Result<Vec<u32>, ()>>()
                    .map_err(|_| {
                        ApiError::bad_request("context holds a token id outside the model's vocabulary")
                    })?;
                context_ids = ids;
            }
            let msgs = generate_messages(
                g.system.as_deref(),
                sm.model.system.as_deref(),
                &model_messages(&sm.model),
                &g.prompt,
                0,
                g.context.is_some(),
            );
            if g.suffix.is_empty() {
                format.render(&PromptRequest::chat(&msgs, &[], think.as_ref()))
            } else {
                format.render(&PromptRequest {
                    prompt: &g.prompt,
                    suffix: &g.suffix,
                    ..PromptRequest::chat(&msgs, &[], think.as_ref())
                })
            }
            .map_err(engine_400)?
        }
    };
    let mut tokens = if context_ids.is_empty() {
        tokenize(&loaded, &text)
    } else {
        context_ids.extend(loaded.vocab.tokenize(&text, false, true));
        context_ids
    };
    let original = tokens.len();
    if c.debug_render_only {
        return Ok(rendered_answer(&c.model, false, &text, original));
    }
    let truncation = fit_tokens(
        &mut tokens,
        n_ctx,
        options.num_keep.max(0) as usize,
        c.truncate.unwrap_or(true),
        original,
        0,
    )?;
    if let Some(t) = &truncation {
        tracing::warn!(model = %c.model, original = t.original_tokens, dropped_tokens = t.dropped_tokens, n_ctx,
            "prompt truncated to fit the context");
    }
    let plan = Plan {
        info: RunInfo {
            model: c.model.clone(),
            started,
            load_duration: lease.load_duration,
            prompt: tokens,
            truncation,
            context: !g.raw,
        },
        lease,
        format: format.clone(),
        options,
        tools: Vec::new(),
        required_tools: None,
        think,
        logprobs: c.logprobs,
        shift: c.shift.unwrap_or(true),
        structured,
    };
    let parser = format.as_deref().map(|f| (f, text.as_str()));
    let running = start(plan, parser).await?;
    Ok(Prepared::Run(Box::new(running)))
}

/// A `/api/generate` body in engine terms: what the handler runs before any model is touched.
fn generate_call(req: GenerateRequest) -> ApiResult<GenerateCall> {
    let n_images = req.images.as_ref().map_or(0, Vec::len);
    Ok(GenerateCall {
        common: call_common(req.common, n_images)?,
        prompt: req.prompt.unwrap_or_default(),
        suffix: req.suffix.unwrap_or_default(),
        system: req.system,
        template: req.template,
        context: req.context,
        raw: req.raw.unwrap_or(false),
    })
}

/// Decodes an `/api/generate` body as the handler does, without a server (fuzz/).
#[doc(hidden)]
pub fn decode_generate(body: &[u8]) -> ApiResult<GenerateCall> {
    generate_call(parse_body(body)?)
}

pub async fn generate(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let started = crate::metrics::arrival();
    into_response(
        async {
            let req: GenerateRequest = parse_body(&body)?;
            let stream = req.common.stream;
            let call = generate_call(req)?;
            Ok(match prepare_generate(&st, call, started).await? {
                Prepared::Answer(v) => axum::Json(v).into_response(),
                Prepared::Run(run) => respond(*run, GenerateNdjson, stream.unwrap_or(true)).await,
            })
        }
        .await,
    )
}

/// Embeddings of several texts: each the model's pooled vector, as `/api/embeddings` returns it.
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: usize,
    pub load_duration: std::time::Duration,
}

impl Embedded {
    /// The vectors at unit length, as `/api/embed` and `/v1/embeddings` return them; cut to
    /// `dimensions` first, as Ollama's `normalize(embedding[:dimensions])`.
    pub fn normalized(mut self, dimensions: Option<usize>) -> Embedded {
        for v in &mut self.vectors {
            if let Some(d) = dimensions.filter(|&d| d > 0 && d < v.len()) {
                v.truncate(d);
            }
            engine::ops::norm::l2_normalize(v);
        }
        self
    }
}

pub async fn embed_texts(
    st: &AppState,
    model: &str,
    inputs: Vec<String>,
    truncate: bool,
    options: Option<&serde_json::Map<String, Value>>,
    keep_alive: Option<&Value>,
) -> ApiResult<Embedded> {
    let sm = find_model(st, model).await?;
    let keep_alive = parse_keep_alive(keep_alive)?;
    let options =
        Options::resolve(model_options(&sm.model).as_ref(), options).map_err(ApiError::bad_request)?;
    let mut want = sm.want.clone();
    want.num_ctx = options.num_ctx;
    want.keep_alive = keep_alive;
    let lease = st.sched.acquire(&want).await?;
    if inputs.is_empty() {
        return Ok(Embedded {
            vectors: Vec::new(),
            prompt_tokens: 0,
            load_duration: lease.load_duration,
        });
    }
    let n_ctx = lease.n_ctx as usize;
    let mut token_lists = Vec::with_capacity(inputs.len());
    for text in &inputs {
        let mut t = lease.loaded.vocab.tokenize(text, true, false);
        if t.is_empty() {
            return Err(ApiError::bad_request("cannot embed an empty input"));
        }
        if t.len() > n_ctx {
            if !truncate {
                return Err(ApiError::bad_request(
                    "the input length exceeds the context length",
                ));
            }
            t.truncate(n_ctx);
        }
        token_lists.push(t);
    }
    let prompt_tokens = token_lists.iter().map(Vec::len).sum();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cancel = Cancel::new();
    let _guard = cancel.guard();
    lease.submit(Command::Embed(EngineEmbed {
        inputs: token_lists,
        cancel,
        reply: Box::new(move |r| {
            let _ = tx.send(r);
        }),
    }))?;
    let vectors = rx
        .await
        .map_err(|_| ApiError::internal("the model's runner stopped"))?
        .map_err(engine_error)?;
    if vectors.iter().flatten().any(|x| !x.is_finite()) {
        return Err(ApiError::internal("embedding contains NaN or Inf values"));
    }
    crate::metrics::METRICS.record_embedding(&lease.loaded.name(), prompt_tokens as u64);
    Ok(Embedded {
        vectors,
        prompt_tokens,
        load_duration: lease.load_duration,
    })
}

/// `input` as a list of texts: a string (empty: none) or a list of strings.
pub fn input_texts(v: Option<&Value>) -> ApiResult<Vec<String>> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::bad_request("invalid input type"))
            })
            .collect(),
        Some(_) => Err(ApiError::bad_request("invalid input type")),
    }
}

pub async fn embed(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let started = crate::metrics::arrival();
    into_response(
        async {
            let req: EmbedRequest = parse_body(&body)?;
            let model = model_name(&req.model)?.to_string();
            let inputs = input_texts(req.input.as_ref())?;
            let dims = match req.dimensions {
                Some(d) if d < 0 => return Err(ApiError::bad_request("dimensions must be positive")),
                d => d.map(|d| d as usize),
            };
            let e = embed_texts(
                &st,
                &model,
                inputs,
                req.truncate.unwrap_or(true),
                req.options.as_ref(),
                req.keep_alive.as_ref(),
            )
            .await?
            .normalized(dims);
            let mut v = json!({"model": model, "embeddings": e.vectors});
            if !e.vectors.is_empty() {
                v["total_duration"] = json!(started.elapsed().as_nanos() as u64);
                v["load_duration"] = json!(e.load_duration.as_nanos() as u64);
                v["prompt_eval_count"] = json!(e.prompt_tokens);
            }
            Ok(axum::Json(v).into_response())
        }
        .await,
    )
}

/// The legacy endpoint: one prompt, `{"embedding": [...]}`.
pub async fn embeddings(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    into_response(
        async {
            let req: EmbeddingsRequest = parse_body(&body)?;
            let model = model_name(&req.model)?.to_string();
            let prompt = req.prompt.unwrap_or_default();
            let inputs = if prompt.is_empty() {
                Vec::new()
            } else {
                vec![prompt]
            };
            // Not normalized, as Ollama's legacy endpoint.
            let e = embed_texts(
                &st,
                &model,
                inputs,
                true,
                req.options.as_ref(),
                req.keep_alive.as_ref(),
            )
            .await?;
            let v: Vec<f64> = e
                .vectors
                .first()
                .map(|v| v.iter().map(|&x| x as f64).collect())
                .unwrap_or_default();
            Ok(axum::Json(json!({ "embedding": v })).into_response())
        }
        .await,
    )
}
