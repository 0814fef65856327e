//! The conversation the template targets render, decoded from the fuzzer's bytes.
//!
//! Input layout: the template text, then (after a NUL byte) messages separated by NUL bytes.
//! A message's first byte picks its role and what else it carries; the rest is its content.
//! Without messages (a seed that is just a template file), a fixed conversation with a system
//! prompt, a tool call and its result is rendered, so every seed reaches the renderer's loops.

use engine::chat::{Message, Think, Tool, ToolCall};
use serde_json::{json, Map};

pub struct ChatInput {
    pub template: String,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub think: Option<Think>,
    /// Jinja only (Go templates end where the conversation ends).
    #[allow(dead_code)]
    pub add_generation_prompt: bool,
}

const ROLES: [&str; 6] = ["system", "user", "assistant", "tool", "developer", ""];

pub fn decode(data: &[u8]) -> ChatInput {
    let mut parts = data.split(|&b| b == 0);
    let template = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let mut messages = Vec::new();
    let mut flags = 0u8;
    for (i, p) in parts.enumerate() {
        let Some((&head, body)) = p.split_first() else {
            continue;
        };
        if i == 0 {
            flags = head;
        }
        let text = String::from_utf8_lossy(body).into_owned();
        let mut m = Message::new(ROLES[usize::from(head) % ROLES.len()], text.clone());
        if head & 0x10 != 0 {
            m.thinking = text.chars().rev().collect();
        }
        if head & 0x20 != 0 {
            let mut arguments = Map::new();
            arguments.insert("q".into(), json!(text));
            arguments.insert("n".into(), json!([1, 2.5, null, {"k": true}]));
            m.tool_calls.push(ToolCall {
                id: Some(format!("call_{i}")),
                name: text.clone(),
                arguments,
            });
        }
        if head & 0x40 != 0 {
            m.tool_name = Some(text.clone());
            m.tool_call_id = Some(format!("call_{i}"));
        }
        if head & 0x80 != 0 {
            m.images = 1;
        }
        messages.push(m);
    }
    if messages.is_empty() {
        messages = default_conversation();
        flags = 0x0b;
    }
    let tools = if flags & 1 != 0 {
        vec![Tool(
            json!({"type": "function", "function": {"name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}),
        )]
    } else {
        Vec::new()
    };
    let think = match (flags >> 2) & 3 {
        0 => None,
        1 => Some(Think::Off),
        2 => Some(Think::On),
        _ => Some(Think::Level("high".into())),
    };
    ChatInput {
        template,
        messages,
        tools,
        think,
        add_generation_prompt: flags & 2 != 0,
    }
}

fn default_conversation() -> Vec<Message> {
    let mut call = Message::new("assistant", "");
    let mut arguments = Map::new();
    arguments.insert("city".into(), json!("Paris"));
    call.tool_calls.push(ToolCall {
        id: Some("call_1".into()),
        name: "get_weather".into(),
        arguments,
    });
    let mut result = Message::new("tool", "{\"temp\": 21}");
    result.tool_name = Some("get_weather".into());
    result.tool_call_id = Some("call_1".into());
    let mut answer = Message::new("assistant", "It is 21 degrees.");
    answer.thinking = "The tool said 21.".into();
    vec![
        Message::new("system", "You are terse."),
        Message::new("user", "Weather in Paris?"),
        call,
        result,
        answer,
        Message::new("user", "Thanks"),
    ]
}
