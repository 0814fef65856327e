//! The OpenAI-compatible endpoints: `/v1/chat/completions`, `/v1/completions`,
//! `/v1/embeddings` (models are in `crate::models`, the Responses API in `crate::responses`).
//! Requests are translated to the native calls (as Ollama's `openai` package does: temperature
//! and top_p default to 1, `max_tokens` is `num_predict`, `response_format` is `format`),
//! answers to OpenAI's objects or SSE chunks ending with `data: [DONE]`. Errors have OpenAI's shape. `options` (e.g. `num_ctx`) may be
//! sent as an extension.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use engine::chat::{Message, ReplyDelta, Think, Tool, ToolCall};
use engine::generate::runner::{Summary, TokenLogprob};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::api::{
    embed_texts, input_texts, prepare_chat, prepare_generate, CallCommon, ChatCall, GenerateCall,
};
use crate::error::{ApiError, ApiResult};
use crate::inference::{logprobs_json, Encoder, RunInfo};
use crate::server::AppState;
use crate::util::{random_u64, tool_call_id, unix_seconds};
use crate::wire::{check_top_logprobs, parse_body};

fn answer(r: ApiResult<Response>) -> Response {
    r.unwrap_or_else(ApiError::openai)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChatCompletionRequest {
    model: Option<String>,
    messages: Option<Vec<OaMessage>>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    seed: Option<i64>,
    stop: Option<Value>,
    temperature: Option<f64>,
    frequency_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    top_p: Option<f64>,
    response_format: Option<ResponseFormat>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    reasoning: Option<Reasoning>,
    reasoning_effort: Option<String>,
    logprobs: Option<bool>,
    top_logprobs: Option<i64>,
    /// Extension: Ollama options (e.g. `num_ctx`).
    options: Option<Map<String, Value>>,
    keep_alive: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Reasoning {
    effort: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponseFormat {
    #[serde(rename = "type")]
    ty: Option<String>,
    json_schema: Option<JsonSchema>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonSchema {
    schema: Option<Value>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct OaMessage {
    role: Option<String>,
    content: Option<Value>,
    reasoning: Option<String>,
    tool_calls: Option<Vec<OaToolCall>>,
    name: Option<String>,
    tool_call_id: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct OaToolCall {
    id: Option<String>,
    function: OaFunction,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct OaFunction {
    name: Option<String>,
    arguments: Option<String>,
}

pub(crate) fn think_from_effort(effort: Option<&str>) -> ApiResult<Option<Think>> {
    Ok(match effort {
        None | Some("") => None,
        Some("none") => Some(Think::Off),
        Some("minimal") => Some(Think::Level("low".into())),
        Some(l @ ("low" | "medium" | "high" | "max")) => Some(Think::Level(l.into())),
        Some("xhigh" | "ultra") => Some(Think::Level("max".into())),
        Some(e) => {
            return Err(ApiError::bad_request(format!(
                "invalid reasoning value: {e:?} (must be \"minimal\", \"low\", \"medium\", \"high\", \"xhigh\", \"ultra\", \"max\", or \"none\")"
            )))
        }
    })
}

/// `stop` as a string or a list of strings. Empty strings stop nothing and are dropped; with
/// none left the request sets no stops, so the model's own (its Modelfile's) still apply.
fn stops(v: Option<Value>) -> ApiResult<Option<Vec<String>>> {
    let invalid = |other: &Value| ApiError::bad_request(format!("invalid type for 'stop' field: {other}"));
    let all = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|i| match i {
                Value::String(s) => Ok(s),
                other => Err(invalid(&other)),
            })
            .collect::<ApiResult<Vec<_>>>()?,
        Some(other) => return Err(invalid(&other)),
    };
    let all: Vec<String> = all.into_iter().filter(|s| !s.is_empty()).collect();
    Ok((!all.is_empty()).then_some(all))
}

/// Converts OpenAI messages: content strings or parts (text parts joined by newlines, as
/// llama.cpp's server does; images are counted, to be refused). `developer` is OpenAI's newer
/// name for `system`.
fn messages(msgs: &[OaMessage]) -> ApiResult<(Vec<Message>, usize)> {
    let mut out = Vec::new();
    let mut images = 0;
    for m in msgs {
        let mut role = m.role.clone().unwrap_or_default().to_lowercase();
        if role == "developer" {
            role = "system".into();
        }
        let mut msg = Message::new(role.clone(), "");
        msg.thinking = m.reasoning.clone().unwrap_or_default();
        match &m.content {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => msg.content = s.clone(),
            Some(Value::Array(parts)) => {
                for p in parts {
                    match p.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let text = p
                                .get("text")
                                .and_then(Value::as_str)
                                .ok_or_else(|| ApiError::bad_request("invalid message format"))?;
                            if !msg.content.is_empty() {
                                msg.content.push('\n');
                            }
                            msg.content.push_str(text);
                        }
                        Some("image_url") | Some("input_audio") => {
                            images += 1;
                            msg.images += 1;
                        }
                        _ => return Err(ApiError::bad_request("invalid message format")),
                    }
                }
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "invalid message content type: {other}"
                )))
            }
        }
        for tc in m.tool_calls.iter().flatten() {
            let args = tc.function.arguments.clone().unwrap_or_default();
            let arguments = if args.trim().is_empty() {
                Map::new()
            } else {
                match serde_json::from_str(&args) {
                    Ok(Value::Object(o)) => o,
                    _ => return Err(ApiError::bad_request("invalid tool call arguments")),
                }
            };
            msg.tool_calls.push(ToolCall {
                id: tc.id.clone(),
                name: tc.function.name.clone().unwrap_or_default(),
                arguments,
            });
        }
        if role == "tool" {
            msg.tool_call_id = m.tool_call_id.clone();
            msg.tool_name = m.name.clone().or_else(|| {
                let id = m.tool_call_id.as_deref()?;
                msgs.iter()
                    .rev()
                    .flat_map(|x| x.tool_calls.iter().flatten())
                    .find(|tc| tc.id.as_deref() == Some(id))
                    .and_then(|tc| tc.function.name.clone())
            });
        }
        out.push(msg);
    }
    Ok((out, images))
}

/// The sampling fields OpenAI requests share.
pub(crate) struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_tokens: Option<i64>,
    pub seed: Option<i64>,
    pub stop: Option<Vec<String>>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
}

/// OpenAI's sampling defaults (temperature and top_p 1) under the request's values, over the
/// request's `options` extension.
pub(crate) fn sampling_options(base: Option<Map<String, Value>>, s: Sampling) -> Map<String, Value> {
    let Sampling {
        temperature,
        top_p,
        max_tokens,
        seed,
        stop,
        frequency_penalty,
        presence_penalty,
    } = s;
    let mut o = base.unwrap_or_default();
    o.insert("temperature".into(), json!(temperature.unwrap_or(1.0)));
    o.insert("top_p".into(), json!(top_p.unwrap_or(1.0)));
    if let Some(n) = max_tokens {
        o.insert("num_predict".into(), json!(n));
    }
    if let Some(s) = seed {
        o.insert("seed".into(), json!(s));
    }
    if let Some(s) = stop {
        o.insert("stop".into(), json!(s));
    }
    if let Some(f) = frequency_penalty {
        o.insert("frequency_penalty".into(), json!(f));
    }
    if let Some(p) = presence_penalty {
        o.insert("presence_penalty".into(), json!(p));
    }
    o
}

/// Whether a tool is a hosted web search (Responses' `web_search`, `web_search_preview`,
/// Anthropic's `web_search_20250305`), to be left out, saying so in the log: the server would
/// run the searches, and ollamars has no search service, so the model is not offered the tool
/// and answers without searching. Refusing it instead would fail every request of clients that
/// declare it by default (Codex CLI does).
pub(crate) fn skip_web_search(tool_type: &str) -> bool {
    let skip = tool_type.starts_with("web_search");
    if skip {
        tracing::info!(
            tool = tool_type,
            "web search tool left out: ollamars has no search service"
        );
    }
    skip
}

/// What `tool_choice` asks of `tools`: the tools offered to the model, and the tools the reply
/// must call (`None`: the model decides). `"none"` offers no tools, `"required"` requires a call
/// of one of them, a named function a call of that one. Without tools, `"auto"` and `"none"`
/// change nothing and are taken (as Ollama takes any `tool_choice`; a client may send
/// `"auto"` with an empty list, or with only hosted tools that [`skip_web_search`] leaves out); a
/// call that is required cannot be made and is refused.
pub(crate) fn tool_choice(
    choice: Option<&Value>,
    tools: Vec<Tool>,
) -> ApiResult<(Vec<Tool>, Option<Vec<Tool>>)> {
    let invalid = |v: &Value| ApiError::bad_request(format!("Invalid value for 'tool_choice': {v}"));
    let Some(choice) = choice.filter(|c| !c.is_null()) else {
        return Ok((tools, None));
    };
    match choice {
        Value::String(s) if s == "auto" => Ok((tools, None)),
        Value::String(s) if s == "none" => Ok((Vec::new(), None)),
        _ if tools.is_empty() => Err(ApiError::bad_request(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
        )),
        Value::String(s) if s == "required" => {
            let required = tools.clone();
            Ok((tools, Some(required)))
        }
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(choice))?;
            let tool = tools.iter().find(|t| t.name() == name).cloned().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "Invalid value for 'tool_choice': no function named '{name}' in 'tools'"
                ))
            })?;
            Ok((tools, Some(vec![tool])))
        }
        other => Err(invalid(other)),
    }
}

/// A `/v1/chat/completions` body in engine terms: what the handler runs before any model is
/// touched.
fn chat_call(req: &ChatCompletionRequest) -> ApiResult<ChatCall> {
    let model = req
        .model
        .clone()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("model is required"))?;
    let oa_msgs = req.messages.clone().unwrap_or_default();
    if oa_msgs.is_empty() {
        return Err(ApiError::bad_request("[] is too short - 'messages'"));
    }
    let (msgs, n_images) = messages(&oa_msgs)?;
    let format = match &req.response_format {
        None => None,
        Some(rf) => match rf.ty.as_deref().map(|t| t.trim().to_lowercase()).as_deref() {
            Some("json_object") => Some(json!("json")),
            Some("json_schema") => rf.json_schema.as_ref().and_then(|s| s.schema.clone()),
            _ => None,
        },
    };
    let top = check_top_logprobs(req.top_logprobs)?;
    let effort = req
        .reasoning
        .as_ref()
        .and_then(|r| r.effort.clone())
        .or(req.reasoning_effort.clone());
    let options = sampling_options(
        req.options.clone(),
        Sampling {
            temperature: req.temperature,
            top_p: req.top_p,
            max_tokens: req.max_tokens.or(req.max_completion_tokens),
            seed: req.seed,
            stop: stops(req.stop.clone())?,
            frequency_penalty: req.frequency_penalty,
            presence_penalty: req.presence_penalty,
        },
    );
    let offered = req
        .tools
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(Tool)
        .collect();
    let (tools, required_tools) = tool_choice(req.tool_choice.as_ref(), offered)?;
    Ok(ChatCall {
        common: CallCommon {
            model,
            options: Some(options),
            format,
            keep_alive: req.keep_alive.clone(),
            think: think_from_effort(effort.as_deref())?,
            truncate: None,
            shift: None,
            logprobs: req.logprobs.unwrap_or(false).then_some(top),
            debug_render_only: false,
            n_images,
        },
        messages: msgs,
        tools,
        required_tools,
    })
}

/// Decodes a `/v1/chat/completions` body as the handler does, without a server (fuzz/).
#[doc(hidden)]
pub fn decode_chat_completion(body: &[u8]) -> ApiResult<ChatCall> {
    chat_call(&parse_body(body)?)
}

pub async fn chat_completions(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let started = crate::metrics::arrival();
    answer(
        async {
            let req: ChatCompletionRequest = parse_body(&body)?;
            let call = chat_call(&req)?;
            let streaming = req.stream.unwrap_or(false);
            let enc = ChatSse {
                id: format!("chatcmpl-{}", random_u64() % 999),
                created: unix_seconds(SystemTime::now()),
                include_usage: req.stream_options.as_ref().is_some_and(|s| s.include_usage),
                role_sent: false,
                tool_sent: false,
                tool_index: 0,
            };
            Ok(prepare_chat(&st, call, started)
                .await?
                .respond_with(enc, streaming)
                .await)
        }
        .await,
    )
}

fn sse(v: &Value) -> String {
    format!("data: {v}\n\n")
}

fn finish_reason(s: &Summary, tool_calls: bool) -> &'static str {
    match s.reason.as_str() {
        "stop" if tool_calls => "tool_calls",
        "stop" => "stop",
        _ => "length",
    }
}

fn usage(s: &Summary) -> Value {
    json!({"prompt_tokens": s.prompt_tokens, "completion_tokens": s.eval_count(),
        "total_tokens": s.prompt_tokens + s.eval_count()})
}

fn oa_tool_calls(calls: &[ToolCall], first: usize) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": c.id.clone().unwrap_or_else(tool_call_id), "index": first + i, "type": "function",
                    "function": {"name": c.name, "arguments": Value::Object(c.arguments.clone()).to_string()}})
            })
            .collect(),
    )
}

/// The end of a stream: the chunk with the finish reason, then (with `include_usage`) the same
/// chunk with no choices and the usage, then `[DONE]`.
fn stream_end(mut last: Value, s: &Summary, include_usage: bool) -> Vec<String> {
    let mut out = vec![sse(&last)];
    if include_usage {
        last["choices"] = json!([]);
        last["usage"] = usage(s);
        out.push(sse(&last));
    }
    out.push("data: [DONE]\n\n".into());
    out
}

/// An error event after a stream started.
fn sse_error(msg: &str) -> String {
    sse(&json!({"error": {"message": msg, "type": "api_error", "param": null, "code": null}}))
}

/// Chat logprobs: Ollama's items, each with `top_logprobs` (empty when none were asked for),
/// which OpenAI's schema requires and clients iterate over.
fn oa_logprobs(lps: &[TokenLogprob]) -> Value {
    let mut items = logprobs_json(lps);
    for item in items.as_array_mut().into_iter().flatten() {
        if item.get("top_logprobs").is_none() {
            item["top_logprobs"] = json!([]);
        }
    }
    json!({ "content": items })
}

/// `/v1/chat/completions` answers.
struct ChatSse {
    id: String,
    created: i64,
    include_usage: bool,
    role_sent: bool,
    tool_sent: bool,
    tool_index: usize,
}

impl ChatSse {
    fn chunk(&self, delta: Value, finish: Option<&str>, logprobs: Option<Value>) -> Value {
        let mut choice = json!({"index": 0, "delta": delta, "finish_reason": finish});
        if let Some(l) = logprobs {
            choice["logprobs"] = l;
        }
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": "",
            "system_fingerprint": "fp_ollama", "choices": [choice]})
    }
}

impl Encoder for ChatSse {
    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn output(&mut self, d: ReplyDelta, lps: Vec<TokenLogprob>, info: &RunInfo) -> Vec<String> {
        let mut out = Vec::new();
        let role = !self.role_sent;
        self.role_sent = true;
        let logprobs = (!lps.is_empty()).then(|| oa_logprobs(&lps));
        let mut emit = |me: &Self, delta: Value, lp: Option<Value>| {
            let mut c = me.chunk(delta, None, lp);
            c["model"] = json!(info.model);
            out.push(sse(&c));
        };
        let mixed = !d.thinking.is_empty() && (!d.content.is_empty() || !d.tool_calls.is_empty());
        if mixed {
            let mut r = json!({"reasoning": d.thinking});
            if role {
                r["role"] = json!("assistant");
            }
            emit(self, r, logprobs.clone());
        }
        let mut delta = json!({ "content": d.content });
        if role && !mixed {
            delta["role"] = json!("assistant");
        }
        if !mixed && !d.thinking.is_empty() {
            delta["reasoning"] = json!(d.thinking);
        }
        if !d.tool_calls.is_empty() {
            delta["tool_calls"] = oa_tool_calls(&d.tool_calls, self.tool_index);
            self.tool_index += d.tool_calls.len();
            self.tool_sent = true;
        }
        emit(self, delta, if mixed { None } else { logprobs });
        out
    }

    fn done(&mut self, s: &Summary, info: &RunInfo) -> Vec<String> {
        let mut out = Vec::new();
        if !self.role_sent {
            self.role_sent = true;
            let mut c = self.chunk(json!({"role": "assistant", "content": ""}), None, None);
            c["model"] = json!(info.model);
            out.push(sse(&c));
        }
        let mut c = self.chunk(json!({}), Some(finish_reason(s, self.tool_sent)), None);
        c["model"] = json!(info.model);
        out.extend(stream_end(c, s, self.include_usage));
        out
    }

    fn error(&mut self, msg: &str) -> String {
        sse_error(msg)
    }

    fn single(&mut self, all: ReplyDelta, lps: Vec<TokenLogprob>, s: &Summary, info: &RunInfo) -> Value {
        let mut message = json!({"role": "assistant", "content": all.content});
        if !all.thinking.is_empty() {
            message["reasoning"] = json!(all.thinking);
        }
        if !all.tool_calls.is_empty() {
            message["tool_calls"] = oa_tool_calls(&all.tool_calls, 0);
        }
        let mut choice = json!({"index": 0, "message": message,
            "finish_reason": finish_reason(s, !all.tool_calls.is_empty())});
        if !lps.is_empty() {
            choice["logprobs"] = oa_logprobs(&lps);
        }
        json!({"id": self.id, "object": "chat.completion", "created": self.created, "model": info.model,
            "system_fingerprint": "fp_ollama", "choices": [choice], "usage": usage(s)})
    }

    fn error_response(&self, e: ApiError) -> Response {
        e.openai()
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CompletionRequest {
    model: Option<String>,
    prompt: Option<Value>,
    frequency_penalty: Option<f64>,
    max_tokens: Option<i64>,
    presence_penalty: Option<f64>,
    seed: Option<i64>,
    stop: Option<Value>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    suffix: Option<String>,
    logprobs: Option<i64>,
    options: Option<Map<String, Value>>,
    keep_alive: Option<Value>,
}

/// A `/v1/completions` body in engine terms: what the handler runs before any model is touched.
fn generate_call(req: &CompletionRequest) -> ApiResult<GenerateCall> {
    let model = req
        .model
        .clone()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("model is required"))?;
    let prompt = match &req.prompt {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            a[0].as_str().unwrap_or_default().to_string()
        }
        Some(_) => return Err(ApiError::bad_request("prompt must be a string")),
    };
    let top = match req.logprobs {
        Some(n @ 1..=20) => Some(n as usize),
        Some(n) if n > 20 => return Err(ApiError::bad_request("logprobs must be between 0 and 20")),
        _ => None,
    };
    let options = sampling_options(
        req.options.clone(),
        Sampling {
            temperature: req.temperature,
            top_p: req.top_p.filter(|&p| p != 0.0),
            max_tokens: req.max_tokens,
            seed: req.seed,
            stop: stops(req.stop.clone())?,
            frequency_penalty: req.frequency_penalty,
            presence_penalty: req.presence_penalty,
        },
    );
    Ok(GenerateCall {
        common: CallCommon {
            model,
            options: Some(options),
            format: None,
            keep_alive: req.keep_alive.clone(),
            think: None,
            truncate: None,
            shift: None,
            logprobs: top,
            debug_render_only: false,
            n_images: 0,
        },
        prompt,
        suffix: req.suffix.clone().unwrap_or_default(),
        system: None,
        template: None,
        context: None,
        raw: false,
    })
}

/// Decodes a `/v1/completions` body as the handler does, without a server (fuzz/).
#[doc(hidden)]
pub fn decode_completion(body: &[u8]) -> ApiResult<GenerateCall> {
    generate_call(&parse_body(body)?)
}

pub async fn completions(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let started = crate::metrics::arrival();
    answer(
        async {
            let req: CompletionRequest = parse_body(&body)?;
            let call = generate_call(&req)?;
            let enc = CompletionSse {
                id: format!("cmpl-{}", random_u64() % 999),
                created: unix_seconds(SystemTime::now()),
                include_usage: req.stream_options.as_ref().is_some_and(|s| s.include_usage),
            };
            let streaming = req.stream.unwrap_or(false);
            Ok(prepare_generate(&st, call, started)
                .await?
                .respond_with(enc, streaming)
                .await)
        }
        .await,
    )
}

/// The legacy completions' logprobs: parallel lists of tokens, their logprobs, and a map of
/// the top alternatives per token.
fn completion_logprobs(lps: &[TokenLogprob]) -> Value {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    json!({
        "tokens": lps.iter().map(|t| text(&t.bytes)).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|t| t.logprob as f64).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|t| {
            let m: Map<String, Value> = t.top.iter().map(|a| (text(&a.bytes), json!(a.logprob as f64))).collect();
            Value::Object(m)
        }).collect::<Vec<_>>(),
    })
}

/// `/v1/completions` answers.
struct CompletionSse {
    id: String,
    created: i64,
    include_usage: bool,
}

impl CompletionSse {
    fn object(&self, text: &str, finish: Option<&str>, info: &RunInfo) -> Value {
        json!({"id": self.id, "object": "text_completion", "created": self.created, "model": info.model,
            "system_fingerprint": "fp_ollama", "choices": [{"text": text, "index": 0, "finish_reason": finish}]})
    }
}

impl Encoder for CompletionSse {
    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn output(&mut self, d: ReplyDelta, lps: Vec<TokenLogprob>, info: &RunInfo) -> Vec<String> {
        let mut v = self.object(&d.content, None, info);
        if !lps.is_empty() {
            v["choices"][0]["logprobs"] = completion_logprobs(&lps);
        }
        vec![sse(&v)]
    }

    fn done(&mut self, s: &Summary, info: &RunInfo) -> Vec<String> {
        stream_end(
            self.object("", Some(finish_reason(s, false)), info),
            s,
            self.include_usage,
        )
    }

    fn error(&mut self, msg: &str) -> String {
        sse_error(msg)
    }

    fn single(&mut self, all: ReplyDelta, lps: Vec<TokenLogprob>, s: &Summary, info: &RunInfo) -> Value {
        let mut v = self.object(&all.content, Some(finish_reason(s, false)), info);
        if !lps.is_empty() {
            v["choices"][0]["logprobs"] = completion_logprobs(&lps);
        }
        v["usage"] = usage(s);
        v
    }

    fn error_response(&self, e: ApiError) -> Response {
        e.openai()
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct EmbeddingRequest {
    model: Option<String>,
    input: Option<Value>,
    dimensions: Option<i64>,
    encoding_format: Option<String>,
    options: Option<Map<String, Value>>,
    keep_alive: Option<Value>,
}

pub async fn embeddings(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    answer(
        async {
            let req: EmbeddingRequest = parse_body(&body)?;
            let model = req
                .model
                .clone()
                .filter(|m| !m.is_empty())
                .ok_or_else(|| ApiError::bad_request("model is required"))?;
            let base64 = match req.encoding_format.as_deref() {
                None | Some("") | Some("float") => false,
                Some("base64") => true,
                Some(f) => {
                    return Err(ApiError::bad_request(format!(
                        "Invalid value for 'encoding_format' = {f}. Supported values: ['float', 'base64']."
                    )))
                }
            };
            let inputs =
                input_texts(req.input.as_ref()).map_err(|_| ApiError::bad_request("invalid input"))?;
            if inputs.is_empty() {
                return Err(ApiError::bad_request("invalid input"));
            }
            let dims = req.dimensions.filter(|&d| d > 0).map(|d| d as usize);
            let e = embed_texts(
                &st,
                &model,
                inputs,
                true,
                req.options.as_ref(),
                req.keep_alive.as_ref(),
            )
            .await?
            .normalized(dims);
            let data: Vec<Value> = e
                .vectors
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let embedding = if base64 {
                        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                        json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                    } else {
                        json!(v)
                    };
                    json!({"object": "embedding", "embedding": embedding, "index": i})
                })
                .collect();
            Ok(axum::Json(json!({"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": e.prompt_tokens, "total_tokens": e.prompt_tokens}}))
            .into_response())
        }
        .await,
    )
}
