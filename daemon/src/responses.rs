//! OpenAI's Responses API, `POST /v1/responses`, as Ollama's `openai/responses.go` maps it onto
//! a chat: `instructions` and the `input` items (messages, `function_call`,
//! `function_call_output`, `reasoning`) become chat messages, `text.format` the `format`,
//! `max_output_tokens` `num_predict`, `reasoning.effort` `think`; the reply comes back as output
//! items (a `reasoning` item for the thinking, a `message`, `function_call`s), whole or as the
//! typed SSE events (`response.created` … `response.completed`) the `openai` client's stream
//! helpers assemble.
//!
//! Nothing is stored: `previous_response_id`, `conversation`, `item_reference` and `background`
//! are refused with a 400 that says to send the whole conversation, rather than answered
//! without the history the client meant to send. Only function tools run (the hosted ones
//! need OpenAI's or ollama.com's servers; `web_search` is left out, the others refused).

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use engine::chat::{Message, ReplyDelta, Tool, ToolCall};
use engine::generate::runner::{Summary, TokenLogprob};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::api::{prepare_chat, CallCommon, ChatCall};
use crate::error::{ApiError, ApiResult};
use crate::inference::{logprobs_json, Encoder, RunInfo};
use crate::openai::{sampling_options, skip_web_search, think_from_effort, tool_choice, Sampling};
use crate::server::AppState;
use crate::util::{random_u64, tool_call_id, unix_seconds};
use crate::wire::{check_top_logprobs, parse_body, str_field};

#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponsesRequest {
    model: Option<String>,
    input: Option<Value>,
    instructions: Option<String>,
    max_output_tokens: Option<i64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    reasoning: Option<ReasoningParam>,
    text: Option<TextParam>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    stream: Option<bool>,
    truncation: Option<String>,
    include: Option<Vec<String>>,
    top_logprobs: Option<i64>,
    metadata: Option<Value>,
    previous_response_id: Option<String>,
    conversation: Option<Value>,
    background: Option<bool>,
    /// Extension: Ollama options (e.g. `num_ctx`).
    options: Option<Map<String, Value>>,
    keep_alive: Option<Value>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(default)]
struct ReasoningParam {
    effort: Option<String>,
    summary: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TextParam {
    format: Option<Value>,
}

/// The text of a message's or a function output's content: a string, or parts whose text is
/// joined as Ollama joins it (no separator). Images are counted, to be refused by the caller.
fn content_text(content: Option<&Value>, images: &mut usize) -> ApiResult<String> {
    let parts = match content {
        None | Some(Value::Null) => return Ok(String::new()),
        Some(Value::String(s)) => return Ok(s.clone()),
        Some(Value::Array(parts)) => parts,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "content must be a string or an array of parts, not {other}"
            )))
        }
    };
    let mut text = String::new();
    for p in parts {
        match str_field(p, "type") {
            Some("input_text" | "output_text") => text.push_str(
                str_field(p, "text").ok_or_else(|| ApiError::bad_request("a text part needs \"text\""))?,
            ),
            Some("refusal") => text.push_str(str_field(p, "refusal").unwrap_or_default()),
            Some("input_image") => *images += 1,
            Some("input_file") => return Err(ApiError::bad_request("file inputs are not supported")),
            Some(t) => return Err(ApiError::bad_request(format!("unknown content type: {t:?}"))),
            None => return Err(ApiError::bad_request("a content part needs a \"type\"")),
        }
    }
    Ok(text)
}

/// The text of a `reasoning` item passed back: Ollama returns the thinking in
/// `encrypted_content` (and the summary); other servers put it in `content`.
fn reasoning_text(item: &Value) -> String {
    if let Some(t) = str_field(item, "encrypted_content").filter(|t| !t.is_empty()) {
        return t.to_string();
    }
    let texts = |key: &str| -> String {
        item.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| str_field(p, "text"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let content = texts("content");
    if content.is_empty() {
        texts("summary")
    } else {
        content
    }
}

/// The roles an input message may have, as the error that refuses another names them.
const INPUT_ROLES: &str = r#"(must be "user", "assistant", "system" or "developer")"#;

/// `instructions` and `input` as chat messages, and the number of images they carry.
fn input_messages(instructions: Option<&str>, input: Option<&Value>) -> ApiResult<(Vec<Message>, usize)> {
    let mut out: Vec<Message> = Vec::new();
    let mut images = 0;
    if let Some(i) = instructions.filter(|i| !i.is_empty()) {
        out.push(Message::new("system", i));
    }
    let items = match input {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::String(s)) => {
            out.push(Message::new("user", s.as_str()));
            &Vec::new()
        }
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ApiError::bad_request(
                "input must be a string or an array of input items",
            ))
        }
    };
    // Reasoning passed back belongs to the assistant turn that follows it.
    let mut thinking = String::new();
    for (i, item) in items.iter().enumerate() {
        let at = |e: String| ApiError::bad_request(format!("input[{i}]: {e}"));
        let ty = str_field(item, "type").or_else(|| item.get("role").map(|_| "message"));
        match ty {
            Some("message") => {
                let role = match str_field(item, "role").map(str::to_lowercase).as_deref() {
                    Some("developer" | "system") => "system",
                    Some("user") => "user",
                    Some("assistant") => "assistant",
                    other => {
                        let role = other.unwrap_or_default();
                        return Err(at(format!("invalid role \"{role}\" {INPUT_ROLES}")));
                    }
                };
                let mut n_images = 0;
                let text = content_text(item.get("content"), &mut n_images).map_err(|e| at(e.message))?;
                images += n_images;
                let mut msg = Message::new(role, text);
                msg.images = n_images;
                if role == "assistant" {
                    msg.thinking = std::mem::take(&mut thinking);
                    // A reply replayed as [function_call, message, function_call_output] stays
                    // one assistant turn, so the tool's result follows the call it answers.
                    let output_follows = items
                        .get(i + 1)
                        .is_some_and(|n| str_field(n, "type") == Some("function_call_output"));
                    if let Some(last) = out
                        .last_mut()
                        .filter(|l| output_follows && l.role == "assistant" && !l.tool_calls.is_empty())
                    {
                        if !last.content.is_empty() && !msg.content.is_empty() {
                            last.content.push('\n');
                        }
                        last.content.push_str(&msg.content);
                        if !msg.thinking.is_empty() {
                            last.thinking = msg.thinking;
                        }
                        continue;
                    }
                }
                out.push(msg);
            }
            Some("function_call") => {
                let name = str_field(item, "name")
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| at("a function_call needs a \"name\"".into()))?;
                let args = str_field(item, "arguments").unwrap_or_default();
                let arguments = if args.trim().is_empty() {
                    Map::new()
                } else {
                    match serde_json::from_str(args) {
                        Ok(Value::Object(o)) => o,
                        _ => return Err(at("function_call arguments must be a JSON object".into())),
                    }
                };
                let call = ToolCall {
                    id: str_field(item, "call_id").map(str::to_string),
                    name: name.to_string(),
                    arguments,
                };
                match out.last_mut().filter(|l| l.role == "assistant") {
                    Some(last) => {
                        last.tool_calls.push(call);
                        if !thinking.is_empty() {
                            last.thinking = std::mem::take(&mut thinking);
                        }
                    }
                    None => {
                        let mut msg = Message::new("assistant", "");
                        msg.thinking = std::mem::take(&mut thinking);
                        msg.tool_calls.push(call);
                        out.push(msg);
                    }
                }
            }
            Some("function_call_output") => {
                let call_id = str_field(item, "call_id").map(str::to_string);
                let mut msg = Message::new(
                    "tool",
                    content_text(item.get("output"), &mut images).map_err(|e| at(e.message))?,
                );
                msg.tool_name = call_id.as_deref().and_then(|id| {
                    out.iter()
                        .rev()
                        .flat_map(|m| &m.tool_calls)
                        .find(|c| c.id.as_deref() == Some(id))
                        .map(|c| c.name.clone())
                });
                msg.tool_call_id = call_id;
                out.push(msg);
            }
            Some("reasoning") => thinking = reasoning_text(item),
            Some("item_reference") => return Err(at(
                "item_reference needs stored responses, and ollamars stores none: send the items themselves"
                    .into(),
            )),
            Some(t) => return Err(at(format!("unknown input item type: {t:?}"))),
            None => return Err(at("an input item needs a \"type\"".into())),
        }
    }
    if !thinking.is_empty() {
        let mut msg = Message::new("assistant", "");
        msg.thinking = thinking;
        out.push(msg);
    }
    Ok((out, images))
}

/// Responses tools are flat (`{"type":"function","name":..}`); chat tools nest the function.
/// A `namespace` groups functions, which the model sees as `namespace.name`.
fn tools(list: &[Value], prefix: &str, out: &mut Vec<Tool>) -> ApiResult<()> {
    for t in list {
        match str_field(t, "type") {
            Some("function") => {
                let name = str_field(t, "name")
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| ApiError::bad_request("a function tool needs a \"name\""))?;
                let mut function = json!({ "name": format!("{prefix}{name}") });
                for key in ["description", "parameters"] {
                    if let Some(v) = t.get(key).filter(|v| !v.is_null()) {
                        function[key] = v.clone();
                    }
                }
                out.push(Tool(json!({"type": "function", "function": function})));
            }
            Some(ty) if skip_web_search(ty) => {}
            Some("namespace") => {
                let name = str_field(t, "name").unwrap_or_default();
                let inner = t
                    .get("tools")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                let prefix = if name.is_empty() {
                    prefix.to_string()
                } else {
                    format!("{prefix}{name}.")
                };
                tools(inner, &prefix, out)?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unsupported tool type {}: ollamars runs function tools only",
                    other.map_or("(none)".into(), |t| format!("{t:?}"))
                )))
            }
        }
    }
    Ok(())
}

/// Responses' `tool_choice` in the chat form `openai::tool_choice` reads (a named function is
/// flat here), with `allowed_tools` narrowing the tools offered first.
fn choose_tools(choice: Option<&Value>, offered: Vec<Tool>) -> ApiResult<(Vec<Tool>, Option<Vec<Tool>>)> {
    let Some(Value::Object(o)) = choice else {
        return tool_choice(choice, offered);
    };
    match o.get("type").and_then(Value::as_str) {
        Some("function") => {
            let name = o.get("name").cloned().unwrap_or(Value::Null);
            tool_choice(
                Some(&json!({"type": "function", "function": {"name": name}})),
                offered,
            )
        }
        Some("allowed_tools") => {
            let allowed: Vec<&str> = o
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| str_field(t, "name"))
                .collect();
            let narrowed: Vec<Tool> = offered
                .into_iter()
                .filter(|t| allowed.contains(&t.name()))
                .collect();
            if narrowed.is_empty() {
                return Err(ApiError::bad_request(
                    "Invalid value for 'tool_choice': no tool of 'allowed_tools' is in 'tools'",
                ));
            }
            let mode = o.get("mode").cloned().unwrap_or(json!("auto"));
            tool_choice(Some(&mode), narrowed)
        }
        _ => tool_choice(choice, offered),
    }
}

/// `text.format` as the chat's `format`.
fn text_format(text: Option<&TextParam>) -> ApiResult<Option<Value>> {
    let Some(f) = text.and_then(|t| t.format.as_ref()).filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match str_field(f, "type") {
        None | Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!("json"))),
        Some("json_schema") => match f.get("schema") {
            Some(s @ Value::Object(_)) => Ok(Some(s.clone())),
            _ => Err(ApiError::bad_request(
                "text.format of type json_schema needs a \"schema\" object",
            )),
        },
        Some(t) => Err(ApiError::bad_request(format!(
            "unsupported text.format type: {t:?}"
        ))),
    }
}

/// A `/v1/responses` body in engine terms: what the handler runs before any model is touched.
fn responses_call(req: &ResponsesRequest) -> ApiResult<ChatCall> {
    let model = req
        .model
        .clone()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("model is required"))?;
    if req.previous_response_id.is_some() || req.conversation.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(ApiError::bad_request(
            "previous_response_id and conversation need stored responses, and ollamars stores none: send the whole conversation in input",
        ));
    }
    if req.background == Some(true) {
        return Err(ApiError::bad_request("background responses are not supported"));
    }
    let (messages, n_images) = input_messages(req.instructions.as_deref(), req.input.as_ref())?;
    if messages.is_empty() {
        return Err(ApiError::bad_request("input is required"));
    }
    let format = text_format(req.text.as_ref())?;
    let top = check_top_logprobs(req.top_logprobs)?;
    let asked = req
        .include
        .iter()
        .flatten()
        .any(|i| i == "message.output_text.logprobs");
    let logprobs = asked.then_some(top);
    let truncate = match req.truncation.as_deref() {
        None => None,
        Some("auto") => Some(true),
        Some("disabled") => Some(false),
        Some(t) => {
            return Err(ApiError::bad_request(format!(
                "invalid truncation {t:?} (must be \"auto\" or \"disabled\")"
            )))
        }
    };
    let mut offered = Vec::new();
    tools(req.tools.as_deref().unwrap_or_default(), "", &mut offered)?;
    let (tools, required_tools) = choose_tools(req.tool_choice.as_ref(), offered)?;
    let options = sampling_options(
        req.options.clone(),
        Sampling {
            temperature: req.temperature,
            top_p: req.top_p,
            max_tokens: req.max_output_tokens,
            seed: None,
            stop: None,
            frequency_penalty: None,
            presence_penalty: None,
        },
    );
    let effort = req.reasoning.as_ref().and_then(|r| r.effort.as_deref());
    Ok(ChatCall {
        common: CallCommon {
            model,
            options: Some(options),
            format,
            keep_alive: req.keep_alive.clone(),
            think: think_from_effort(effort)?,
            truncate,
            shift: None,
            logprobs,
            debug_render_only: false,
            n_images,
        },
        messages,
        tools,
        required_tools,
    })
}

/// Decodes a `/v1/responses` body as the handler does, without a server (fuzz/).
#[doc(hidden)]
pub fn decode_response_request(body: &[u8]) -> ApiResult<ChatCall> {
    responses_call(&parse_body(body)?)
}

pub async fn responses(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let started = crate::metrics::arrival();
    let r = async {
        let req: ResponsesRequest = parse_body(&body)?;
        let call = responses_call(&req)?;
        let streaming = req.stream.unwrap_or(false);
        let enc = ResponseEncoder::new(echo(&req));
        Ok(prepare_chat(&st, call, started)
            .await?
            .respond_with(enc, streaming)
            .await)
    }
    .await;
    r.unwrap_or_else(ApiError::openai)
}

/// The request's settings every response object repeats, with OpenAI's defaults.
fn echo(req: &ResponsesRequest) -> Map<String, Value> {
    let reasoning = req
        .reasoning
        .as_ref()
        .map_or(Value::Null, |r| json!({"effort": r.effort, "summary": r.summary}));
    let format = req
        .text
        .as_ref()
        .and_then(|t| t.format.clone())
        .filter(|f| !f.is_null());
    // OpenAI's default is "disabled"; without the field a chat drops its oldest messages to fit
    // the context, as Ollama's does, so the echo says what happened.
    let truncation = req.truncation.clone().unwrap_or_else(|| "auto".into());
    let v = json!({
        "previous_response_id": null,
        "instructions": req.instructions,
        "tools": req.tools.clone().unwrap_or_default(),
        "tool_choice": req.tool_choice.clone().filter(|c| !c.is_null()).unwrap_or(json!("auto")),
        "truncation": truncation,
        "parallel_tool_calls": req.parallel_tool_calls.unwrap_or(true),
        "text": {"format": format.unwrap_or(json!({"type": "text"}))},
        "temperature": req.temperature.unwrap_or(1.0),
        "top_p": req.top_p.unwrap_or(1.0),
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "top_logprobs": req.top_logprobs.unwrap_or(0),
        "reasoning": reasoning,
        "max_output_tokens": req.max_output_tokens,
        "max_tool_calls": null,
        "store": false,
        "background": false,
        "service_tier": "default",
        "metadata": req.metadata.clone().filter(|m| !m.is_null()).unwrap_or(json!({})),
        "safety_identifier": null,
        "prompt_cache_key": null,
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{:016x}", random_u64())
}

fn usage(s: &Summary) -> Value {
    let output = s.eval_count();
    json!({"input_tokens": s.prompt_tokens, "input_tokens_details": {"cached_tokens": s.cached_tokens},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": s.thinking_tokens},
        "total_tokens": s.prompt_tokens + output})
}

fn text_part(text: &str, logprobs: &[Value]) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs})
}

fn message_item(id: &str, status: &str, text: Option<(&str, &[Value])>) -> Value {
    let content: Vec<Value> = text.map(|(t, l)| text_part(t, l)).into_iter().collect();
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"id": id, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}],
        "encrypted_content": text})
}

fn function_call_item(c: &ToolCall, status: &str, arguments: &str) -> Value {
    json!({"id": new_id("fc"), "type": "function_call", "status": status,
        "call_id": c.id.clone().unwrap_or_else(tool_call_id), "name": c.name, "arguments": arguments})
}

/// Logprobs in Responses' shape: every item has `top_logprobs`.
fn text_logprobs(lps: &[TokenLogprob]) -> Vec<Value> {
    let mut items = match logprobs_json(lps) {
        Value::Array(a) => a,
        _ => Vec::new(),
    };
    for item in &mut items {
        if item.get("top_logprobs").is_none() {
            item["top_logprobs"] = json!([]);
        }
    }
    items
}

/// The output item a stream is in the middle of.
enum Open {
    Reasoning {
        id: String,
        text: String,
    },
    Message {
        id: String,
        text: String,
        logprobs: Vec<Value>,
    },
}

/// `/v1/responses` answers. Streamed, every event is numbered and the output items are opened,
/// filled and closed in order (`output_index` is the number of items closed before).
struct ResponseEncoder {
    id: String,
    created: i64,
    echo: Map<String, Value>,
    model: String,
    sequence: u64,
    started: bool,
    open: Option<Open>,
    done: Vec<Value>,
}

impl ResponseEncoder {
    fn new(echo: Map<String, Value>) -> Self {
        ResponseEncoder {
            id: new_id("resp"),
            created: unix_seconds(SystemTime::now()),
            echo,
            model: String::new(),
            sequence: 0,
            started: false,
            open: None,
            done: Vec::new(),
        }
    }

    /// The response object with a status and output so far.
    fn object(&self, status: &str, output: Vec<Value>, usage: Value) -> Value {
        let mut o = json!({"id": self.id, "object": "response", "created_at": self.created,
            "completed_at": null, "status": status, "error": null, "incomplete_details": null,
            "model": self.model, "output": output, "usage": usage});
        if let Value::Object(m) = &mut o {
            m.extend(self.echo.clone());
        }
        o
    }

    /// The object at the end of a generation: `incomplete` when cut by `max_output_tokens` or
    /// the context.
    fn finished(&self, s: &Summary, output: Vec<Value>) -> Value {
        let cut = s.reason.as_str() == "length";
        let mut o = self.object(if cut { "incomplete" } else { "completed" }, output, usage(s));
        o["completed_at"] = json!(unix_seconds(SystemTime::now()));
        if cut {
            o["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        o
    }

    fn event(&mut self, ty: &str, mut data: Value) -> String {
        data["type"] = json!(ty);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        format!("event: {ty}\ndata: {data}\n\n")
    }

    fn start(&mut self, info: &RunInfo, out: &mut Vec<String>) {
        if self.started {
            return;
        }
        self.started = true;
        self.model = info.model.clone();
        for ty in ["response.created", "response.in_progress"] {
            let response = self.object("in_progress", Vec::new(), Value::Null);
            out.push(self.event(ty, json!({ "response": response })));
        }
    }

    /// Closes the open item, if any.
    fn close(&mut self, out: &mut Vec<String>) {
        let index = self.done.len();
        let item = match self.open.take() {
            None => return,
            Some(Open::Reasoning { id, text }) => {
                let part = json!({"type": "summary_text", "text": text});
                let e = json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text});
                out.push(self.event("response.reasoning_summary_text.done", e));
                let e = json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part});
                out.push(self.event("response.reasoning_summary_part.done", e));
                reasoning_item(&id, &text)
            }
            Some(Open::Message { id, text, logprobs }) => {
                let e = json!({"item_id": id, "output_index": index, "content_index": 0, "text": text,
                    "logprobs": logprobs});
                out.push(self.event("response.output_text.done", e));
                let e = json!({"item_id": id, "output_index": index, "content_index": 0,
                    "part": text_part(&text, &logprobs)});
                out.push(self.event("response.content_part.done", e));
                message_item(&id, "completed", Some((&text, &logprobs)))
            }
        };
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.done.push(item);
    }

    fn thinking(&mut self, delta: &str, out: &mut Vec<String>) {
        let index = self.done.len();
        if !matches!(self.open, Some(Open::Reasoning { .. })) {
            self.close(out);
            let id = new_id("rs");
            let item = json!({"id": id, "type": "reasoning", "summary": []});
            out.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            let part = json!({"type": "summary_text", "text": ""});
            let e = json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part});
            out.push(self.event("response.reasoning_summary_part.added", e));
            self.open = Some(Open::Reasoning {
                id,
                text: String::new(),
            });
        }
        let Some(Open::Reasoning { id, text }) = &mut self.open else {
            return;
        };
        text.push_str(delta);
        let e = json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": delta});
        out.push(self.event("response.reasoning_summary_text.delta", e));
    }

    fn text(&mut self, delta: &str, lps: &[TokenLogprob], out: &mut Vec<String>) {
        let index = self.done.len();
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.close(out);
            let id = new_id("msg");
            let item = message_item(&id, "in_progress", None);
            out.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            let e =
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part("", &[])});
            out.push(self.event("response.content_part.added", e));
            self.open = Some(Open::Message {
                id,
                text: String::new(),
                logprobs: Vec::new(),
            });
        }
        let Some(Open::Message { id, text, logprobs }) = &mut self.open else {
            return;
        };
        let new = text_logprobs(lps);
        text.push_str(delta);
        logprobs.extend(new.iter().cloned());
        let e = json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta, "logprobs": new});
        out.push(self.event("response.output_text.delta", e));
    }

    fn tool_calls(&mut self, calls: &[ToolCall], out: &mut Vec<String>) {
        self.close(out);
        for c in calls {
            let index = self.done.len();
            let args = Value::Object(c.arguments.clone()).to_string();
            let item = function_call_item(c, "completed", &args);
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["arguments"] = json!("");
            out.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            ));
            let e = json!({"item_id": item["id"], "output_index": index, "delta": args});
            out.push(self.event("response.function_call_arguments.delta", e));
            let e = json!({"item_id": item["id"], "output_index": index, "arguments": args});
            out.push(self.event("response.function_call_arguments.done", e));
            out.push(self.event(
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            ));
            self.done.push(item);
        }
    }
}

impl Encoder for ResponseEncoder {
    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn output(&mut self, d: ReplyDelta, lps: Vec<TokenLogprob>, info: &RunInfo) -> Vec<String> {
        let mut out = Vec::new();
        self.start(info, &mut out);
        if !d.thinking.is_empty() {
            self.thinking(&d.thinking, &mut out);
        }
        if !d.content.is_empty() {
            self.text(&d.content, &lps, &mut out);
        }
        if !d.tool_calls.is_empty() {
            self.tool_calls(&d.tool_calls, &mut out);
        }
        out
    }

    fn done(&mut self, s: &Summary, info: &RunInfo) -> Vec<String> {
        let mut out = Vec::new();
        self.start(info, &mut out);
        self.close(&mut out);
        let response = self.finished(s, self.done.clone());
        let ty = if response["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push(self.event(ty, json!({ "response": response })));
        out
    }

    fn error(&mut self, msg: &str) -> String {
        let mut response = self.object("failed", self.done.clone(), Value::Null);
        response["error"] = json!({"code": "server_error", "message": msg});
        self.event("response.failed", json!({ "response": response }))
    }

    fn single(&mut self, all: ReplyDelta, lps: Vec<TokenLogprob>, s: &Summary, info: &RunInfo) -> Value {
        self.model = info.model.clone();
        let mut output = Vec::new();
        if !all.thinking.is_empty() {
            output.push(reasoning_item(&new_id("rs"), &all.thinking));
        }
        if !all.content.is_empty() || all.tool_calls.is_empty() {
            let lps = text_logprobs(&lps);
            output.push(message_item(
                &new_id("msg"),
                "completed",
                Some((&all.content, &lps)),
            ));
        }
        for c in &all.tool_calls {
            output.push(function_call_item(
                c,
                "completed",
                &Value::Object(c.arguments.clone()).to_string(),
            ));
        }
        self.finished(s, output)
    }

    fn error_response(&self, e: ApiError) -> Response {
        e.openai()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::testing::{delta, info, summary, typed_events, weather_call};

    #[test]
    fn a_stream_opens_fills_and_closes_each_item_in_order() {
        let mut enc = ResponseEncoder::new(echo(&ResponsesRequest::default()));
        let mut frames = enc.output(delta("let me ", "", vec![]), vec![], &info());
        frames.extend(enc.output(delta("see", "It is", vec![]), vec![], &info()));
        frames.extend(enc.output(delta("", " sunny", vec![]), vec![], &info()));
        frames.extend(enc.output(delta("", "", vec![weather_call("call_9")]), vec![], &info()));
        frames.extend(enc.done(&summary(engine::stop::DoneReason::Length, 6), &info()));
        let ev = typed_events(&frames);
        let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.reasoning_summary_part.added",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.done",
                "response.reasoning_summary_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.incomplete",
            ]
        );
        for (i, e) in ev.iter().enumerate() {
            assert_eq!(e["sequence_number"], i, "{e}");
        }
        assert_eq!(ev[0]["response"]["model"], "m:latest");
        assert_eq!(ev[6]["text"], "let me see");
        assert_eq!(ev[13]["text"], "It is sunny");
        assert_eq!(ev[13]["output_index"], 1);
        assert_eq!(ev[17]["delta"], r#"{"city":"Paris"}"#);
        let last = &ev[20]["response"];
        assert_eq!(last["status"], "incomplete");
        assert_eq!(last["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(last["usage"]["output_tokens"], 6);
        assert_eq!(last["usage"]["input_tokens_details"]["cached_tokens"], 2);
        let out = last["output"].as_array().unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0]["encrypted_content"], "let me see");
        assert_eq!(out[1]["content"][0]["text"], "It is sunny");
        assert_eq!(out[2]["call_id"], "call_9");
        assert_eq!(out[2]["arguments"], r#"{"city":"Paris"}"#);
        // Each item's id is the same in every event about it.
        assert_eq!(ev[2]["item"]["id"], out[0]["id"]);
        assert_eq!(ev[11]["item_id"], out[1]["id"]);
        assert_eq!(ev[16]["item"]["id"], out[2]["id"]);
    }

    #[test]
    fn a_whole_response_lists_reasoning_message_and_calls() {
        let req: ResponsesRequest = serde_json::from_value(json!({"instructions": "hi",
            "temperature": 0.2, "metadata": {"k": "v"}}))
        .unwrap();
        let mut enc = ResponseEncoder::new(echo(&req));
        let all = ReplyDelta {
            thinking: "hmm".into(),
            content: "Paris".into(),
            tool_calls: vec![],
        };
        let r = enc.single(all, vec![], &summary(engine::stop::DoneReason::Stop, 2), &info());
        assert_eq!(r["object"], "response");
        assert_eq!(r["status"], "completed");
        assert!(r["completed_at"].is_i64());
        assert_eq!(r["instructions"], "hi");
        assert_eq!(r["temperature"], 0.2);
        assert_eq!(r["metadata"]["k"], "v");
        assert_eq!(r["output"][0]["type"], "reasoning");
        assert_eq!(r["output"][0]["summary"][0]["text"], "hmm");
        assert_eq!(r["output"][1]["content"][0]["text"], "Paris");
        assert_eq!(r["usage"]["total_tokens"], 7);
    }
}
