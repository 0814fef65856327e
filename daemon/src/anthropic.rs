//! Anthropic's Messages API, `POST /v1/messages`, as Ollama's `anthropic` package maps it onto a
//! chat (so the `anthropic` clients and Claude Code work with `ANTHROPIC_BASE_URL` set to the
//! daemon): `system` and the messages' blocks (`text`, `tool_use`, `tool_result`, `thinking`)
//! become chat messages, `max_tokens` is `num_predict`, `stop_sequences` `stop`, `thinking`
//! `think` (at `output_config.effort`'s level); the reply is content blocks (`thinking`, `text`,
//! `tool_use`), whole or as Anthropic's SSE events (`message_start` … `message_stop`). Errors
//! have Anthropic's shape. Unlike Ollama, `tool_choice` is honoured (`any` and `tool` constrain
//! decoding to a call). `/v1/messages/count_tokens` counts exactly. The key may come as
//! `x-api-key` (see `security`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use engine::chat::{Message, ReplyDelta, Think, Tool, ToolCall};
use engine::generate::runner::{Summary, TokenLogprob};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::api::{prepare_chat, CallCommon, ChatCall, Prepared};
use crate::error::{logged, ApiError, ApiResult};
use crate::inference::{Encoder, RunInfo};
use crate::openai::{skip_web_search, tool_choice};
use crate::server::AppState;
use crate::util::{random_u64, tool_call_id};
use crate::wire::{parse_body, str_field};

/// An error in Anthropic's shape.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    let ty = match status {
        StatusCode::BAD_REQUEST => "invalid_request_error",
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::FORBIDDEN => "permission_error",
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": ty, "message": message}});
    logged((status, axum::Json(body)).into_response(), message)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MessagesRequest {
    model: Option<String>,
    max_tokens: Option<i64>,
    messages: Option<Vec<Value>>,
    system: Option<Value>,
    stream: Option<bool>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    stop_sequences: Option<Vec<String>>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    thinking: Option<Value>,
    output_config: Option<Value>,
    /// Extension: Ollama options (e.g. `num_ctx`).
    options: Option<Map<String, Value>>,
    keep_alive: Option<Value>,
}

/// Content as blocks: a string is one text block.
fn blocks(content: Option<&Value>) -> ApiResult<Vec<Value>> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![json!({"type": "text", "text": s})]),
        Some(Value::Array(b)) => Ok(b.clone()),
        Some(_) => Err(ApiError::bad_request(
            "content must be a string or an array of content blocks",
        )),
    }
}

/// The text of text blocks, joined as Ollama joins them (no separator); images are counted.
fn text_of(content: Option<&Value>, images: &mut usize) -> ApiResult<String> {
    let mut text = String::new();
    for b in blocks(content)? {
        match str_field(&b, "type") {
            Some("text") => text.push_str(str_field(&b, "text").unwrap_or_default()),
            Some("image") => *images += 1,
            Some(t) => {
                return Err(ApiError::bad_request(format!(
                    "unsupported content block type {t:?} (text and images only)"
                )))
            }
            None => return Err(ApiError::bad_request("a content block needs a \"type\"")),
        }
    }
    Ok(text)
}

/// `system` and `messages` as chat messages, and the number of images they carry.
fn chat_messages(system: Option<&Value>, messages: &[Value]) -> ApiResult<(Vec<Message>, usize)> {
    let mut out = Vec::new();
    let mut images = 0;
    match system {
        None | Some(Value::Null) => {}
        Some(s) => {
            let text = text_of(Some(s), &mut images)
                .map_err(|e| ApiError::bad_request(format!("system: {}", e.message)))?;
            if !text.is_empty() {
                out.push(Message::new("system", text));
            }
        }
    }
    for (i, m) in messages.iter().enumerate() {
        let at = |e: String| ApiError::bad_request(format!("messages[{i}]: {e}"));
        // Claude Code sends "system" turns mid-conversation (its beta
        // mid-conversation-system); they stay system messages, as in Ollama.
        let role = match str_field(m, "role").map(str::to_lowercase).as_deref() {
            Some("user") => "user",
            Some("assistant") => "assistant",
            Some("system") => "system",
            other => {
                return Err(at(format!(
                    "invalid role \"{}\" (must be \"user\", \"assistant\" or \"system\")",
                    other.unwrap_or_default()
                )))
            }
        };
        let mut msg = Message::new(role, "");
        let mut results = Vec::new();
        for b in blocks(m.get("content")).map_err(|e| at(e.message))? {
            match str_field(&b, "type") {
                Some("text") => msg.content.push_str(str_field(&b, "text").unwrap_or_default()),
                Some("image") => {
                    msg.images += 1;
                    images += 1;
                }
                Some("thinking") => msg.thinking = str_field(&b, "thinking").unwrap_or_default().to_string(),
                // Opaque by design: there is nothing to give the model.
                Some("redacted_thinking") => {}
                Some("tool_use") => {
                    let id = str_field(&b, "id").filter(|s| !s.is_empty());
                    let name = str_field(&b, "name").filter(|s| !s.is_empty());
                    let (Some(id), Some(name)) = (id, name) else {
                        return Err(at("a tool_use block needs an \"id\" and a \"name\"".into()));
                    };
                    let arguments = match b.get("input") {
                        None | Some(Value::Null) => Map::new(),
                        Some(Value::Object(o)) => o.clone(),
                        Some(_) => return Err(at("a tool_use block's input must be an object".into())),
                    };
                    msg.tool_calls.push(ToolCall {
                        id: Some(id.to_string()),
                        name: name.to_string(),
                        arguments,
                    });
                }
                Some("tool_result") => {
                    let mut n = 0;
                    let text = text_of(b.get("content"), &mut n)
                        .map_err(|e| at(format!("tool_result: {}", e.message)))?;
                    let mut r = Message::new("tool", text);
                    r.images = n;
                    images += n;
                    r.tool_call_id = str_field(&b, "tool_use_id").map(str::to_string);
                    r.tool_name = r.tool_call_id.as_deref().and_then(|id| {
                        out.iter()
                            .rev()
                            .flat_map(|m: &Message| &m.tool_calls)
                            .find(|c| c.id.as_deref() == Some(id))
                            .map(|c| c.name.clone())
                    });
                    results.push(r);
                }
                Some(t) => return Err(at(format!("unsupported content block type {t:?}"))),
                None => return Err(at("a content block needs a \"type\"".into())),
            }
        }
        // A user turn's tool results answer the previous assistant turn, so they come first.
        let has_body = !msg.content.is_empty()
            || msg.images > 0
            || !msg.tool_calls.is_empty()
            || !msg.thinking.is_empty();
        let only_results = !results.is_empty() && !has_body;
        if role == "user" {
            out.append(&mut results);
        }
        if has_body || (role == "user" && !only_results) {
            out.push(msg);
        }
        out.append(&mut results);
    }
    Ok((out, images))
}

/// Anthropic's tools (`name`, `description`, `input_schema`) as chat tools. Anthropic's own
/// tool types need Anthropic's servers or schemas: web search is left out (see
/// `openai::skip_web_search`), bash, text editor and computer are refused.
fn tools(list: &[Value]) -> ApiResult<Vec<Tool>> {
    list.iter()
        .filter(|t| !str_field(t, "type").is_some_and(skip_web_search))
        .map(|t| {
            match str_field(t, "type") {
                None | Some("custom") => {}
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "unsupported tool type {other:?}: ollamars runs custom tools only"
                    )))
                }
            }
            let name = str_field(t, "name")
                .filter(|n| !n.is_empty())
                .ok_or_else(|| ApiError::bad_request("a tool needs a \"name\""))?;
            let mut function = json!({ "name": name });
            if let Some(d) = t.get("description").filter(|d| !d.is_null()) {
                function["description"] = d.clone();
            }
            if let Some(s) = t.get("input_schema").filter(|s| !s.is_null()) {
                function["parameters"] = s.clone();
            }
            Ok(Tool(json!({"type": "function", "function": function})))
        })
        .collect()
}

/// Anthropic's `tool_choice` (`auto`, `any`, `tool`, `none`) in the chat form.
fn choose_tools(choice: Option<&Value>, offered: Vec<Tool>) -> ApiResult<(Vec<Tool>, Option<Vec<Tool>>)> {
    let Some(c) = choice.filter(|c| !c.is_null()) else {
        return Ok((offered, None));
    };
    let chat = match str_field(c, "type") {
        Some("auto") => return Ok((offered, None)),
        Some("none") => json!("none"),
        Some("any") => json!("required"),
        Some("tool") => {
            json!({"type": "function", "function": {"name": c.get("name").cloned().unwrap_or(Value::Null)}})
        }
        _ => return Err(ApiError::bad_request(format!("invalid tool_choice: {c}"))),
    };
    tool_choice(Some(&chat), offered)
}

/// `thinking`: `enabled` (at the level of `output_config.effort`, if given), `disabled`, or
/// `adaptive` (the model's default). Effort alone leaves thinking to the model: Claude Code
/// sends it on every request, and a model that cannot think must still answer.
fn think(thinking: Option<&Value>, output_config: Option<&Value>) -> ApiResult<Option<Think>> {
    let Some(t) = thinking.filter(|t| !t.is_null()) else {
        return Ok(None);
    };
    let effort = output_config
        .and_then(|o| str_field(o, "effort"))
        .map(|e| e.trim().to_lowercase());
    match str_field(t, "type") {
        Some("enabled") => Ok(Some(match effort.as_deref() {
            Some("xhigh") => Think::Level("high".into()),
            Some(l @ ("low" | "medium" | "high" | "max")) => Think::Level(l.into()),
            _ => Think::On,
        })),
        Some("disabled") => Ok(Some(Think::Off)),
        Some("adaptive") => Ok(None),
        _ => Err(ApiError::bad_request(format!("invalid thinking: {t}"))),
    }
}

/// A `/v1/messages` body in engine terms: what the handler runs before any model is touched.
fn messages_call(req: &MessagesRequest) -> ApiResult<ChatCall> {
    let model = req
        .model
        .clone()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("model: Field required"))?;
    let msgs = req.messages.as_deref().unwrap_or_default();
    if msgs.is_empty() {
        return Err(ApiError::bad_request(
            "messages: at least one message is required",
        ));
    }
    let (messages, n_images) = chat_messages(req.system.as_ref(), msgs)?;
    let mut options = req.options.clone().unwrap_or_default();
    match req.max_tokens {
        Some(n) if n < 1 => return Err(ApiError::bad_request("max_tokens: must be at least 1")),
        Some(n) => {
            options.insert("num_predict".into(), json!(n));
        }
        None => {}
    }
    for (key, v) in [
        ("temperature", req.temperature.map(|t| json!(t))),
        ("top_p", req.top_p.map(|p| json!(p))),
        ("top_k", req.top_k.map(|k| json!(k))),
        (
            "stop",
            req.stop_sequences
                .clone()
                .filter(|s| !s.is_empty())
                .map(|s| json!(s)),
        ),
    ] {
        if let Some(v) = v {
            options.insert(key.into(), v);
        }
    }
    let (tools, required_tools) = choose_tools(
        req.tool_choice.as_ref(),
        tools(req.tools.as_deref().unwrap_or_default())?,
    )?;
    Ok(ChatCall {
        common: CallCommon {
            model,
            options: Some(options),
            format: None,
            keep_alive: req.keep_alive.clone(),
            think: think(req.thinking.as_ref(), req.output_config.as_ref())?,
            truncate: None,
            shift: None,
            logprobs: None,
            debug_render_only: false,
            n_images,
        },
        messages,
        tools,
        required_tools,
    })
}

/// Decodes a `/v1/messages` body as the handler does, without a server (fuzz/).
#[doc(hidden)]
pub fn decode_messages(body: &[u8]) -> ApiResult<ChatCall> {
    generation_call(&parse_body(body)?)
}

/// A `/v1/messages` generation: [`messages_call`] with `max_tokens`, which Anthropic's API (and
/// Ollama's) require there (`count_tokens` takes the same body without it).
fn generation_call(req: &MessagesRequest) -> ApiResult<ChatCall> {
    let call = messages_call(req)?;
    if req.max_tokens.is_none() {
        return Err(ApiError::bad_request("max_tokens: Field required"));
    }
    Ok(call)
}

pub async fn messages(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let started = crate::metrics::arrival();
    let r = async {
        let req: MessagesRequest = parse_body(&body)?;
        let call = generation_call(&req)?;
        let streaming = req.stream.unwrap_or(false);
        let enc = MessagesEncoder::new(req.stop_sequences.clone().unwrap_or_default());
        Ok(prepare_chat(&st, call, started)
            .await?
            .respond_with(enc, streaming)
            .await)
    }
    .await;
    r.unwrap_or_else(|e: ApiError| error_response(e.status, &e.message))
}

/// `POST /v1/messages/count_tokens`: the prompt's exact length in the model's tokens, its
/// template rendered and tokenized as for a generation (Ollama estimates a quarter of the
/// characters). The model is loaded to read its vocabulary.
pub async fn count_tokens(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let started = crate::metrics::arrival();
    let r = async {
        let req: MessagesRequest = parse_body(&body)?;
        let mut call = messages_call(&req)?;
        call.common.debug_render_only = true;
        call.common.truncate = Some(false);
        match prepare_chat(&st, call, started).await? {
            Prepared::Answer(v) => v["_debug_info"]["prompt_tokens"]
                .as_u64()
                .ok_or_else(|| ApiError::internal("the prompt was not rendered")),
            Prepared::Run(_) => Err(ApiError::internal("a count started a generation")),
        }
    }
    .await;
    match r {
        Ok(n) => axum::Json(json!({ "input_tokens": n })).into_response(),
        Err(e) => error_response(e.status, &e.message),
    }
}

fn tool_use_block(c: &ToolCall) -> Value {
    json!({"type": "tool_use", "id": c.id.clone().unwrap_or_else(tool_call_id), "name": c.name,
        "input": Value::Object(c.arguments.clone())})
}

#[derive(PartialEq)]
enum Block {
    Thinking,
    Text,
}

/// `/v1/messages` answers. Streamed, content blocks are started, filled and stopped in order.
struct MessagesEncoder {
    id: String,
    started: bool,
    /// The index of the open block, or of the next one.
    index: usize,
    open: Option<Block>,
    tool_used: bool,
    /// The request's `stop_sequences`: the one that ends a reply is reported by name.
    stops: Vec<String>,
}

fn event(ty: &str, mut data: Value) -> String {
    data["type"] = json!(ty);
    format!("event: {ty}\ndata: {data}\n\n")
}

impl MessagesEncoder {
    fn new(stops: Vec<String>) -> Self {
        MessagesEncoder {
            id: format!("msg_{:016x}{:08x}", random_u64(), random_u64() as u32),
            started: false,
            index: 0,
            open: None,
            tool_used: false,
            stops,
        }
    }

    /// A finished reply's `stop_reason` and `stop_sequence`. A reply with tool calls (whole
    /// ones: the parser emits no other) is `tool_use` however it ended, as in Ollama, so that an
    /// agent loop runs them.
    fn stop_fields(&self, s: &Summary, tool_calls: bool) -> (&'static str, Value) {
        let by_request = s.stop_sequence.as_ref().filter(|m| self.stops.contains(m));
        match (s.reason.as_str(), by_request) {
            _ if tool_calls => ("tool_use", Value::Null),
            ("length", _) => ("max_tokens", Value::Null),
            (_, Some(m)) => ("stop_sequence", json!(m)),
            _ => ("end_turn", Value::Null),
        }
    }

    fn start(&mut self, info: &RunInfo, out: &mut Vec<String>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let message = json!({"id": self.id, "type": "message", "role": "assistant", "model": info.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": info.prompt.len(), "output_tokens": 0}});
        out.push(event("message_start", json!({ "message": message })));
        out.push(event("ping", json!({})));
    }

    fn close(&mut self, out: &mut Vec<String>) {
        if self.open.take().is_some() {
            out.push(event("content_block_stop", json!({"index": self.index})));
            self.index += 1;
        }
    }

    /// Appends to a thinking or text block, starting it first if another kind is open.
    fn append(&mut self, kind: Block, text: &str, out: &mut Vec<String>) {
        let (block, delta) = match kind {
            Block::Thinking => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                json!({"type": "thinking_delta", "thinking": text}),
            ),
            Block::Text => (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": text}),
            ),
        };
        if self.open.as_ref() != Some(&kind) {
            self.close(out);
            out.push(event(
                "content_block_start",
                json!({"index": self.index, "content_block": block}),
            ));
            self.open = Some(kind);
        }
        out.push(event(
            "content_block_delta",
            json!({"index": self.index, "delta": delta}),
        ));
    }
}

impl Encoder for MessagesEncoder {
    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn output(&mut self, d: ReplyDelta, _: Vec<TokenLogprob>, info: &RunInfo) -> Vec<String> {
        let mut out = Vec::new();
        self.start(info, &mut out);
        if !d.thinking.is_empty() {
            self.append(Block::Thinking, &d.thinking, &mut out);
        }
        if !d.content.is_empty() {
            self.append(Block::Text, &d.content, &mut out);
        }
        for c in &d.tool_calls {
            self.close(&mut out);
            let mut block = tool_use_block(c);
            let input = std::mem::replace(&mut block["input"], json!({})).to_string();
            out.push(event(
                "content_block_start",
                json!({"index": self.index, "content_block": block}),
            ));
            let delta = json!({"type": "input_json_delta", "partial_json": input});
            out.push(event(
                "content_block_delta",
                json!({"index": self.index, "delta": delta}),
            ));
            out.push(event("content_block_stop", json!({"index": self.index})));
            self.index += 1;
            self.tool_used = true;
        }
        out
    }

    fn done(&mut self, s: &Summary, info: &RunInfo) -> Vec<String> {
        let mut out = Vec::new();
        self.start(info, &mut out);
        self.close(&mut out);
        let (reason, sequence) = self.stop_fields(s, self.tool_used);
        let delta = json!({"stop_reason": reason, "stop_sequence": sequence});
        let usage = json!({"input_tokens": s.prompt_tokens, "output_tokens": s.eval_count()});
        out.push(event("message_delta", json!({"delta": delta, "usage": usage})));
        out.push(event("message_stop", json!({})));
        out
    }

    fn error(&mut self, msg: &str) -> String {
        event("error", json!({"error": {"type": "api_error", "message": msg}}))
    }

    fn single(&mut self, all: ReplyDelta, _: Vec<TokenLogprob>, s: &Summary, info: &RunInfo) -> Value {
        let mut content = Vec::new();
        if !all.thinking.is_empty() {
            content.push(json!({"type": "thinking", "thinking": all.thinking, "signature": ""}));
        }
        if !all.content.is_empty() {
            content.push(json!({"type": "text", "text": all.content}));
        }
        content.extend(all.tool_calls.iter().map(tool_use_block));
        let (reason, sequence) = self.stop_fields(s, !all.tool_calls.is_empty());
        json!({"id": self.id, "type": "message", "role": "assistant", "model": info.model,
            "content": content, "stop_reason": reason, "stop_sequence": sequence,
            "usage": {"input_tokens": s.prompt_tokens, "output_tokens": s.eval_count()}})
    }

    fn error_response(&self, e: ApiError) -> Response {
        error_response(e.status, &e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::testing::{delta, info, summary, typed_events, weather_call};

    #[test]
    fn a_stream_starts_fills_and_stops_each_block_in_order() {
        let mut enc = MessagesEncoder::new(vec![]);
        let mut frames = enc.output(delta("hm", "", vec![]), vec![], &info());
        frames.extend(enc.output(delta("m", "Sure", vec![]), vec![], &info()));
        let call = weather_call("toolu_9");
        frames.extend(enc.output(delta("", "", vec![call]), vec![], &info()));
        frames.extend(enc.done(&summary(engine::stop::DoneReason::Stop, 4), &info()));
        let ev = typed_events(&frames);
        let shape: Vec<String> = ev
            .iter()
            .map(|e| format!("{} {}", e["type"].as_str().unwrap(), e["index"]))
            .collect();
        assert_eq!(
            shape,
            [
                "message_start null",
                "ping null",
                "content_block_start 0",
                "content_block_delta 0",
                "content_block_delta 0",
                "content_block_stop 0",
                "content_block_start 1",
                "content_block_delta 1",
                "content_block_stop 1",
                "content_block_start 2",
                "content_block_delta 2",
                "content_block_stop 2",
                "message_delta null",
                "message_stop null",
            ]
        );
        assert_eq!(ev[0]["message"]["usage"]["input_tokens"], 5);
        assert_eq!(ev[2]["content_block"]["type"], "thinking");
        assert_eq!(ev[4]["delta"]["thinking"], "m");
        assert_eq!(ev[7]["delta"], json!({"type": "text_delta", "text": "Sure"}));
        assert_eq!(ev[9]["content_block"]["input"], json!({}));
        assert_eq!(ev[10]["delta"]["partial_json"], r#"{"city":"Paris"}"#);
        assert_eq!(ev[12]["delta"]["stop_reason"], "tool_use");
        assert_eq!(ev[12]["usage"]["output_tokens"], 4);
    }

    #[test]
    fn a_whole_message_lists_its_blocks() {
        let mut enc = MessagesEncoder::new(vec![]);
        let all = ReplyDelta {
            thinking: String::new(),
            content: "Paris".into(),
            tool_calls: vec![],
        };
        let m = enc.single(
            all,
            vec![],
            &summary(engine::stop::DoneReason::Length, 4),
            &info(),
        );
        assert_eq!(m["type"], "message");
        assert!(m["id"].as_str().unwrap().starts_with("msg_"));
        assert_eq!(m["content"], json!([{"type": "text", "text": "Paris"}]));
        assert_eq!(m["stop_reason"], "max_tokens");
        assert_eq!(m["usage"], json!({"input_tokens": 5, "output_tokens": 4}));
    }

    #[test]
    fn a_requested_stop_sequence_is_reported_by_name() {
        let stopped_at = |seq: &str| Summary {
            stop_sequence: Some(seq.into()),
            ..summary(engine::stop::DoneReason::Stop, 3)
        };
        let mut enc = MessagesEncoder::new(vec!["END".into(), "\n\nHuman:".into()]);
        let m = enc.single(ReplyDelta::default(), vec![], &stopped_at("END"), &info());
        assert_eq!(
            (&m["stop_reason"], &m["stop_sequence"]),
            (&json!("stop_sequence"), &json!("END"))
        );
        let frames = enc.done(&stopped_at("\n\nHuman:"), &info());
        let ev = typed_events(&frames);
        let last = &ev.iter().find(|e| e["type"] == "message_delta").unwrap()["delta"];
        assert_eq!(
            last,
            &json!({"stop_reason": "stop_sequence", "stop_sequence": "\n\nHuman:"})
        );
        // Whole tool calls are run whatever ended the reply.
        let calls = delta("", "", vec![weather_call("toolu_1")]);
        let cut = summary(engine::stop::DoneReason::Length, 3);
        let m = enc.single(calls, vec![], &cut, &info());
        assert_eq!(m["stop_reason"], "tool_use");
        // A stop string of the model's own (not the request's) ends the turn as usual.
        let mut enc = MessagesEncoder::new(vec!["END".into()]);
        let m = enc.single(ReplyDelta::default(), vec![], &stopped_at("<|im_end|>"), &info());
        assert_eq!(
            (&m["stop_reason"], &m["stop_sequence"]),
            (&json!("end_turn"), &Value::Null)
        );
    }
}
