//! Shared helpers of the data-driven template tests: the conversation cases under
//! `tests/data/templates/cases/` (Ollama-style JSON) and expected-output comparison.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use engine::chat::{Message, Think, Tool, ToolCall};
use serde_json::Value;

/// 2024-07-26 14:05:09 UTC: the instant the reference renderings were made at.
pub fn fixed_now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_722_002_709)
}

pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/templates")
}

pub struct Case {
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub think: Option<Think>,
    pub add_generation_prompt: bool,
    /// `/api/generate`'s prompt and suffix (fill-in-the-middle cases).
    pub prompt: String,
    pub suffix: String,
}

pub fn load_case(name: &str) -> Case {
    let path = data_dir().join("cases").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    let messages = v["messages"].as_array().unwrap().iter().map(message).collect();
    let tools = v
        .get("tools")
        .and_then(Value::as_array)
        .map(|a| a.iter().cloned().map(Tool).collect())
        .unwrap_or_default();
    let think = match v.get("think") {
        Some(Value::Bool(true)) => Some(Think::On),
        Some(Value::Bool(false)) => Some(Think::Off),
        Some(Value::String(s)) => Some(Think::Level(s.clone())),
        _ => None,
    };
    Case {
        messages,
        tools,
        think,
        add_generation_prompt: v
            .get("add_generation_prompt")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        prompt: v
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        suffix: v
            .get("suffix")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    }
}

fn message(v: &Value) -> Message {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    Message {
        role: s("role").unwrap(),
        content: s("content").unwrap_or_default(),
        thinking: s("thinking").unwrap_or_default(),
        images: 0,
        tool_calls: v
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| ToolCall {
                        id: c.get("id").and_then(Value::as_str).map(str::to_string),
                        name: c["function"]["name"].as_str().unwrap().to_string(),
                        arguments: c["function"]["arguments"]
                            .as_object()
                            .cloned()
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        tool_name: s("tool_name"),
        tool_call_id: s("tool_call_id"),
    }
}

/// Compares `got` with the expected file; with `UPDATE_EXPECT=1` rewrites the file instead.
/// Returns a description of the mismatch, if any.
pub fn check_expected(path: &Path, got: &str) -> Option<String> {
    if std::env::var_os("UPDATE_EXPECT").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, got).unwrap();
        return None;
    }
    let want = match std::fs::read_to_string(path) {
        Ok(w) => w,
        Err(e) => return Some(format!("{}: {e}", path.display())),
    };
    if want == got {
        return None;
    }
    let at = want.chars().zip(got.chars()).take_while(|(a, b)| a == b).count();
    let ctx = |s: &str| {
        s.chars()
            .skip(at.saturating_sub(40))
            .take(120)
            .collect::<String>()
    };
    Some(format!(
        "{}: differs at char {at}\n  want: {:?}\n  got:  {:?}",
        path.display(),
        ctx(&want),
        ctx(got)
    ))
}

/// The path of the Qwen2.5-Coder 0.5B GGUF: `OLLAMARS_TEST_QWEN`, or fetched by the project script.
pub fn qwen_model() -> PathBuf {
    if let Some(p) = std::env::var_os("OLLAMARS_TEST_QWEN") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(root.join("scripts/fetch-model.sh"))
        .arg("qwen25-coder-0.5b")
        .output()
        .expect("running scripts/fetch-model.sh");
    assert!(
        out.status.success(),
        "fetch-model.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}
