//! Model output parsed with the formats the real templates imply: thinking split out, tool calls
//! turned into structured calls, for Qwen 2.5/3 (Hermes `<tool_call>`), Llama 3.1 (bare JSON),
//! Mistral (`[TOOL_CALLS]`) and DeepSeek-R1 (thinking opened by the prompt), through both the
//! GGUF (Jinja) and the Ollama (Go) templates.

mod support;

use engine::chat::{Message, ReplyDelta, Think, Tool};
use engine::template::{ChatFormat, ModelTemplates, PromptRequest};
use support::{data_dir, fixed_now, load_case};

fn jinja(name: &str) -> ModelTemplates {
    ModelTemplates {
        chat_template: Some(std::fs::read_to_string(data_dir().join(format!("jinja/{name}.jinja"))).unwrap()),
        ..ModelTemplates::default()
    }
}

fn go(name: &str) -> ModelTemplates {
    ModelTemplates {
        modelfile_template: Some(
            std::fs::read_to_string(data_dir().join(format!("go/{name}.gotmpl"))).unwrap(),
        ),
        ..ModelTemplates::default()
    }
}

fn weather_tools() -> Vec<Tool> {
    load_case("tools").tools
}

/// Renders a one-message prompt, then streams `output` through the reply parser in small chunks.
fn reply(model: &ModelTemplates, think: Option<Think>, tools: &[Tool], output: &str) -> (String, ReplyDelta) {
    let format = ChatFormat::select(model, None).unwrap();
    let msgs = [Message::new("user", "What is the weather in Paris?")];
    let req = PromptRequest {
        now: fixed_now(),
        ..PromptRequest::chat(&msgs, tools, think.as_ref())
    };
    let prompt = format.render(&req).unwrap();
    let mut parser = format.reply_parser(&prompt, think.as_ref(), tools);
    let mut all = ReplyDelta::default();
    let chars: Vec<char> = output.chars().collect();
    for chunk in chars.chunks(3) {
        all.append(parser.push(&chunk.iter().collect::<String>()));
    }
    all.append(parser.finish());
    (prompt, all)
}

#[test]
fn qwen_hermes_tool_calls() {
    let out = "I'll look it up.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
    for model in [jinja("qwen2.5"), go("qwen2.5"), jinja("hermes3-tool-use")] {
        let (_, r) = reply(&model, None, &weather_tools(), out);
        assert_eq!(r.content, "I'll look it up.\n");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "get_weather");
        assert_eq!(
            serde_json::Value::Object(r.tool_calls[0].arguments.clone()),
            serde_json::json!({"location": "Paris", "unit": "celsius"})
        );
    }
}

#[test]
fn llama31_json_tool_calls() {
    let out = "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}";
    for model in [jinja("llama3.1"), jinja("llama3.2"), go("llama3.1")] {
        let (_, r) = reply(&model, None, &weather_tools(), out);
        assert_eq!(r.content, "");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].arguments["location"], "Paris");
        // A plain answer stays an answer.
        let (_, r) = reply(&model, None, &weather_tools(), "It is sunny in Paris.");
        assert_eq!(r.content, "It is sunny in Paris.");
        assert!(r.tool_calls.is_empty());
    }
}

#[test]
fn mistral_tool_calls() {
    let out = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": \"abc123DEF\"}]";
    for model in [jinja("mistral-nemo"), go("mistral"), go("mistral-tools")] {
        let (_, r) = reply(&model, None, &weather_tools(), out);
        assert_eq!(r.content, "");
        assert_eq!(r.tool_calls.len(), 1, "{model:?}");
        assert_eq!(r.tool_calls[0].id.as_deref(), Some("abc123DEF"));
    }
}

#[test]
fn qwen3_thinking_and_think_false() {
    let out = "<think>\nParis is in France.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>";
    for model in [jinja("qwen3"), go("qwen3")] {
        let (_, r) = reply(&model, Some(Think::On), &weather_tools(), out);
        assert_eq!(r.thinking, "Paris is in France.\n");
        assert_eq!(r.content, "");
        assert_eq!(r.tool_calls.len(), 1);
        // think: false reaches the template (Qwen3 closes an empty think block in the prompt).
        let (prompt, r) = reply(&model, Some(Think::Off), &[], "Sunny.");
        assert!(prompt.trim_end().ends_with("</think>"), "{prompt:?}");
        assert_eq!((r.thinking.as_str(), r.content.as_str()), ("", "Sunny."));
        assert!(ChatFormat::select(&model, None).unwrap().capabilities().thinking);
    }
}

#[test]
fn deepseek_r1_thinking_opened_by_the_prompt() {
    let (prompt, r) = reply(
        &jinja("deepseek-r1-distill-llama"),
        Some(Think::On),
        &[],
        "The user greets.\n</think>\n\nHello!",
    );
    assert!(prompt.ends_with("<think>\n"));
    assert_eq!(r.thinking, "The user greets.\n");
    assert_eq!(r.content, "Hello!");
    let (_, r) = reply(
        &go("deepseek-r1"),
        Some(Think::On),
        &[],
        "<think>\nThe user greets.\n</think>\n\nHello!",
    );
    assert_eq!(r.thinking, "The user greets.\n");
    assert_eq!(r.content, "Hello!");
}

#[test]
fn models_without_thinking_or_tools_pass_through() {
    let (_, r) = reply(
        &jinja("gemma3"),
        Some(Think::On),
        &[],
        "<think>not special</think> hi",
    );
    assert_eq!(r.content, "<think>not special</think> hi");
    assert!(
        !ChatFormat::select(&jinja("gemma3"), None)
            .unwrap()
            .capabilities()
            .tools
    );
}
