//! Request decoding without a server: the `decode_*` entry points run exactly what the handlers
//! run before a model is touched (they are what fuzz/fuzz_targets/http_request.rs drives).
//! Inputs the fuzzer found crashing are kept at the end of this file.

use daemon::anthropic::decode_messages;
use daemon::api::{decode_chat, decode_generate, ChatCall};
use daemon::error::ApiResult;
use daemon::openai::{decode_chat_completion, decode_completion};
use daemon::responses::decode_response_request;
use engine::chat::Think;
use serde_json::{json, Value};

fn msg<T>(r: Result<T, daemon::error::ApiError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => {
            assert_eq!(e.status.as_u16(), 400, "{}", e.message);
            e.message
        }
    }
}

fn responses(body: Value) -> ApiResult<ChatCall> {
    decode_response_request(body.to_string().as_bytes())
}

fn responses_refused(body: Value) -> String {
    msg(responses(body))
}

fn messages(body: Value) -> ApiResult<ChatCall> {
    decode_messages(body.to_string().as_bytes())
}

fn messages_refused(body: Value) -> String {
    msg(messages(body))
}

/// Each message's role and content.
fn roles(c: &ChatCall) -> Vec<(&str, &str)> {
    c.messages
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect()
}

#[test]
fn ollama_chat_converts_messages_tools_and_think() {
    let body = json!({"model": "m", "think": "high", "top_logprobs": 2, "logprobs": true,
        "messages": [{"role": "USER", "content": "hi", "images": ["aGk=", "aGk="]},
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "content": "1", "tool_name": "f"}],
        "tools": [{"type": "function", "function": {"name": "f"}}]});
    let c = decode_chat(body.to_string().as_bytes()).unwrap();
    assert_eq!(c.common.model, "m");
    assert_eq!(c.messages[0].role, "user");
    assert_eq!((c.messages[0].images, c.common.n_images), (2, 2));
    assert_eq!(c.messages[1].tool_calls[0].arguments["a"], json!(1));
    assert_eq!(c.messages[2].tool_name.as_deref(), Some("f"));
    assert_eq!(c.tools[0].name(), "f");
    assert_eq!(c.common.think, Some(Think::Level("high".into())));
    assert_eq!(c.common.logprobs, Some(2));
}

#[test]
fn ollama_requests_refuse_bad_fields_with_400() {
    assert_eq!(msg(decode_chat(b"  ")), "missing request body");
    assert_eq!(msg(decode_chat(br#"{"messages": []}"#)), "model is required");
    assert!(msg(decode_chat(br#"{"model": "m", "think": "lots"}"#)).contains("invalid think value"));
    assert_eq!(
        msg(decode_generate(br#"{"model": "m", "top_logprobs": 21}"#)),
        "top_logprobs must be between 0 and 20"
    );
    let bad_args = br#"{"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "[1]"}}]}]}"#;
    assert_eq!(msg(decode_chat(bad_args)), "invalid tool call arguments");
    let g = decode_generate(br#"{"model": "m", "prompt": "p", "images": ["x"], "raw": true}"#).unwrap();
    assert_eq!((g.prompt.as_str(), g.common.n_images, g.raw), ("p", 1, true));
}

#[test]
fn openai_chat_maps_parts_tool_names_and_sampling() {
    let body = json!({"model": "gpt", "max_tokens": 9, "stop": "x", "reasoning_effort": "minimal",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                {"type": "image_url", "image_url": {"url": "data:"}}]},
            {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]});
    let c = decode_chat_completion(body.to_string().as_bytes()).unwrap();
    // Text parts are lines of one message (llama.cpp's server joins them so), not run together.
    assert_eq!(c.messages[0].content, "a\nb");
    assert_eq!(c.common.n_images, 1);
    assert_eq!(c.messages[2].tool_name.as_deref(), Some("f"));
    let o = c.common.options.unwrap();
    assert_eq!(
        (o["temperature"].clone(), o["top_p"].clone()),
        (json!(1.0), json!(1.0))
    );
    assert_eq!(
        (o["num_predict"].clone(), o["stop"].clone()),
        (json!(9), json!(["x"]))
    );
    assert_eq!(c.common.think, Some(Think::Level("low".into())));
    // `developer` is OpenAI's newer name for the system role.
    let c = decode_chat_completion(
        br#"{"model": "g", "messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}]}"#,
    )
    .unwrap();
    assert_eq!(
        (c.messages[0].role.as_str(), c.messages[0].content.as_str()),
        ("system", "be brief")
    );
    // No stop strings in the request (an empty list, empty strings) leave the model's own.
    for stop in [r#"[]"#, r#""""#, r#"["", ""]"#] {
        let body =
            format!(r#"{{"model": "g", "messages": [{{"role": "user", "content": "hi"}}], "stop": {stop}}}"#);
        let o = decode_chat_completion(body.as_bytes())
            .unwrap()
            .common
            .options
            .unwrap();
        assert!(o.get("stop").is_none(), "stop {stop}: {o:?}");
        let body = format!(r#"{{"model": "g", "prompt": "hi", "stop": {stop}}}"#);
        let o = decode_completion(body.as_bytes())
            .unwrap()
            .common
            .options
            .unwrap();
        assert!(o.get("stop").is_none(), "stop {stop}: {o:?}");
    }
    assert_eq!(
        msg(decode_chat_completion(br#"{"model": "gpt", "messages": []}"#)),
        "[] is too short - 'messages'"
    );
    assert!(msg(decode_chat_completion(
        br#"{"model": "g", "messages": [{"content": 1}]}"#
    ))
    .contains("content type"));
}

#[test]
fn openai_tool_choice_without_tools_is_taken_unless_a_call_is_required() {
    let chat = |extra: &str| {
        let body = format!(r#"{{"model": "g", "messages": [{{"role": "user", "content": "hi"}}]{extra}}}"#);
        decode_chat_completion(body.as_bytes())
    };
    // Nothing to choose from: "auto" and "none" change nothing (Ollama ignores the field), also
    // when the only tool is a hosted one that is left out.
    for extra in [
        r#", "tool_choice": "auto""#,
        r#", "tool_choice": "none", "tools": []"#,
    ] {
        let c = chat(extra).unwrap();
        assert!(c.tools.is_empty() && c.required_tools.is_none(), "{extra}");
    }
    let c = responses(
        json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}],
        "tool_choice": "auto"}),
    )
    .unwrap();
    assert!(c.tools.is_empty() && c.required_tools.is_none());
    for extra in [
        r#", "tool_choice": "required""#,
        r#", "tool_choice": {"type": "function", "function": {"name": "f"}}, "tools": []"#,
    ] {
        assert!(msg(chat(extra)).contains("only allowed when 'tools'"), "{extra}");
    }
}

#[test]
fn openai_completion_prompt_and_logprobs() {
    let g = decode_completion(br#"{"model": "m", "prompt": ["once"], "logprobs": 3, "top_p": 0}"#).unwrap();
    assert_eq!((g.prompt.as_str(), g.common.logprobs), ("once", Some(3)));
    assert_eq!(g.common.options.unwrap()["top_p"], json!(1.0));
    assert_eq!(
        msg(decode_completion(br#"{"model": "m", "prompt": [1, 2]}"#)),
        "prompt must be a string"
    );
    assert_eq!(
        msg(decode_completion(br#"{"model": "m", "logprobs": 21}"#)),
        "logprobs must be between 0 and 20"
    );
}

#[test]
fn responses_string_input_is_one_user_message_after_the_instructions() {
    let c = responses(json!({"model": "m", "input": "hi", "instructions": "be brief",
        "max_output_tokens": 7, "reasoning": {"effort": "none"}}))
    .unwrap();
    assert_eq!(roles(&c), [("system", "be brief"), ("user", "hi")]);
    let o = c.common.options.unwrap();
    assert_eq!(o["num_predict"], 7);
    assert_eq!(o["temperature"], 1.0);
    assert_eq!(c.common.think, Some(engine::chat::Think::Off));
}

#[test]
fn responses_tool_round_trip_becomes_a_call_and_its_result() {
    let c = responses(json!({"model": "m", "input": [
        {"role": "developer", "content": "use tools"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather "},
            {"type": "input_text", "text": "in Paris?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "call it"}]},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "checking"}]},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ], "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}},
        {"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "find"}]}]}))
    .unwrap();
    let m = &c.messages;
    assert_eq!(m.len(), 4, "{m:?}");
    assert_eq!(
        (m[0].role.as_str(), m[0].content.as_str()),
        ("system", "use tools")
    );
    assert_eq!(m[1].content, "weather in Paris?");
    assert_eq!(m[2].role, "assistant");
    assert_eq!(m[2].thinking, "call it");
    assert_eq!(m[2].content, "checking");
    assert_eq!(m[2].tool_calls[0].name, "weather");
    assert_eq!(m[2].tool_calls[0].arguments["city"], "Paris");
    assert_eq!(m[3].role, "tool");
    assert_eq!(m[3].content, "sunny");
    assert_eq!(m[3].tool_name.as_deref(), Some("weather"));
    assert_eq!(m[3].tool_call_id.as_deref(), Some("call_1"));
    let names: Vec<_> = c.tools.iter().map(|t| t.name().to_string()).collect();
    assert_eq!(names, ["weather", "crm.find"]);
    assert!(c.required_tools.is_none());
}

#[test]
fn responses_tool_choice_and_text_format_map_to_the_chat_call() {
    let tools = json!([{"type": "function", "name": "a"}, {"type": "function", "name": "b"}]);
    let c = responses(json!({"model": "m", "input": "x", "tools": tools,
        "tool_choice": {"type": "function", "name": "b"}}))
    .unwrap();
    assert_eq!(c.required_tools.unwrap()[0].name(), "b");
    let c = responses(json!({"model": "m", "input": "x", "tools": tools, "tool_choice":
        {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "a"}]}}))
    .unwrap();
    assert_eq!(c.tools.len(), 1);
    assert_eq!(c.required_tools.unwrap()[0].name(), "a");
    let c = responses(json!({"model": "m", "input": "x", "tools": tools, "tool_choice": "none"})).unwrap();
    assert!(c.tools.is_empty());
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let c = responses(json!({"model": "m", "input": "x",
        "text": {"format": {"type": "json_schema", "name": "n", "schema": schema}}}))
    .unwrap();
    assert_eq!(c.common.format, Some(schema));
    let c =
        responses(json!({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}})).unwrap();
    assert_eq!(c.common.format, Some(json!("json")));
    let c = responses(json!({"model": "m", "input": "x", "top_logprobs": 3,
        "include": ["message.output_text.logprobs"], "truncation": "disabled"}))
    .unwrap();
    assert_eq!(c.common.logprobs, Some(3));
    assert_eq!(c.common.truncate, Some(false));
}

#[test]
fn responses_refuse_what_cannot_be_served_by_name() {
    assert_eq!(
        responses_refused(json!({"model": "m", "input": [{"role": "tool", "content": "x"}]})),
        r#"input[0]: invalid role "tool" (must be "user", "assistant", "system" or "developer")"#
    );
    assert!(responses_refused(json!({"input": "x"})).contains("model"));
    assert!(responses_refused(json!({"model": "m"})).contains("input"));
    assert!(
        responses_refused(json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}))
            .contains("stores none")
    );
    assert!(
        responses_refused(json!({"model": "m", "input": "x", "conversation": "c"})).contains("stores none")
    );
    assert!(
        responses_refused(json!({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}))
            .contains("input[0]")
    );
    assert!(
        responses_refused(json!({"model": "m", "input": [{"role": "user", "content":
        [{"type": "input_file", "file_id": "f"}]}]}))
        .contains("file inputs")
    );
    assert!(
        responses_refused(json!({"model": "m", "input": [{"type": "computer_call"}]}))
            .contains("computer_call")
    );
    assert!(responses_refused(json!({"model": "m", "input": [{"content": "no type"}]})).contains("type"));
    assert!(
        responses_refused(json!({"model": "m", "input": "x", "tools": [{"type": "file_search"}]}))
            .contains("file_search")
    );
    // A hosted web search is left out (Codex CLI declares one on every request), not refused.
    let c = responses(
        json!({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"},
        {"type": "web_search", "external_web_access": false}, {"type": "web_search_preview"}]}),
    )
    .unwrap();
    assert_eq!(c.tools.iter().map(|t| t.name()).collect::<Vec<_>>(), ["f"]);
    assert!(responses_refused(json!({"model": "m", "input": 5})).contains("input"));
    assert!(responses_refused(
        json!({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "[1]"}]})
    )
    .contains("arguments"));
    assert!(responses_refused(
        json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema"}}})
    )
    .contains("schema"));
    assert!(
        responses_refused(json!({"model": "m", "input": "x", "reasoning": {"effort": "lots"}}))
            .contains("reasoning")
    );
    assert!(
        responses_refused(json!({"model": "m", "input": "x", "truncation": "middle"})).contains("truncation")
    );
    assert!(
        responses_refused(json!({"model": "m", "input": "x", "background": true})).contains("background")
    );
}

#[test]
fn messages_system_blocks_and_a_tool_round_trip_become_chat_messages() {
    let c = messages(json!({"model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be "},
        {"type": "text", "text": "brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "use the tool", "signature": "s"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "sunny"}]}, {"type": "text", "text": "And tomorrow?"}]},
        ],
        "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
        "stop_sequences": ["END"], "temperature": 0.5, "top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}}))
    .unwrap();
    let m = &c.messages;
    let roles: Vec<_> = m.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert_eq!(m[0].content, "Be brief.");
    assert_eq!(m[2].thinking, "use the tool");
    assert_eq!(m[2].content, "Checking.");
    assert_eq!(m[2].tool_calls[0].arguments["city"], "Paris");
    assert_eq!(m[3].content, "sunny");
    assert_eq!(m[3].tool_name.as_deref(), Some("weather"));
    assert_eq!(m[4].content, "And tomorrow?");
    let o = c.common.options.unwrap();
    assert_eq!(o["num_predict"], 64);
    assert_eq!(o["stop"], json!(["END"]));
    assert_eq!(o["top_k"], 5);
    // Anthropic's defaults are the model's: no temperature unless given.
    assert_eq!(o["temperature"], 0.5);
    assert!(o.get("top_p").is_none());
    assert_eq!(c.common.think, Some(Think::On));
    assert_eq!(c.tools[0].name(), "weather");
    assert_eq!(c.tools[0].0["function"]["parameters"], json!({"type": "object"}));
}

#[test]
fn messages_tool_choice_and_effort_map_to_the_chat_call() {
    let tools = json!([{"name": "a"}, {"name": "b"}]);
    let base = |choice: Value| {
        json!({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}],
        "tools": tools, "tool_choice": choice})
    };
    assert_eq!(
        messages(base(json!({"type": "tool", "name": "b"})))
            .unwrap()
            .required_tools
            .unwrap()[0]
            .name(),
        "b"
    );
    assert_eq!(
        messages(base(json!({"type": "any"})))
            .unwrap()
            .required_tools
            .unwrap()
            .len(),
        2
    );
    assert!(messages(base(json!({"type": "none"}))).unwrap().tools.is_empty());
    assert!(messages(base(json!({"type": "auto"})))
        .unwrap()
        .required_tools
        .is_none());
    // Effort sets the level of thinking that is enabled; alone (as Claude Code sends it on every
    // request) it leaves thinking to the model, so a model that cannot think still answers.
    let think = |thinking: Value| {
        let body = json!({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}],
            "thinking": thinking, "output_config": {"effort": "xhigh"}});
        messages(body).unwrap().common.think
    };
    assert_eq!(
        think(json!({"type": "enabled", "budget_tokens": 1024})),
        Some(Think::Level("high".into()))
    );
    assert_eq!(think(json!({"type": "disabled"})), Some(Think::Off));
    assert_eq!(think(json!({"type": "adaptive"})), None);
    assert_eq!(think(Value::Null), None);
    // A "system" turn mid-conversation (Claude Code's mid-conversation-system) stays one.
    let c = messages(
        json!({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "a"},
        {"role": "system", "content": "agents: x"}, {"role": "user", "content": "b"}]}),
    )
    .unwrap();
    assert_eq!(roles(&c), [("user", "a"), ("system", "agents: x"), ("user", "b")]);
}

#[test]
fn messages_refuse_what_cannot_be_served_by_name() {
    let user = json!([{"role": "user", "content": "x"}]);
    assert!(messages_refused(json!({"messages": user})).contains("model"));
    assert!(messages_refused(json!({"model": "m"})).contains("messages"));
    assert!(
        messages_refused(json!({"model": "m", "messages": user, "max_tokens": 0})).contains("max_tokens")
    );
    // Required, as by Anthropic's API and Ollama's.
    assert_eq!(
        messages_refused(json!({"model": "m", "messages": user})),
        "max_tokens: Field required"
    );
    assert_eq!(
        messages_refused(json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]})),
        r#"messages[0]: invalid role "tool" (must be "user", "assistant" or "system")"#
    );
    assert!(messages_refused(
        json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "document"}]}]})
    )
    .contains("document"));
    assert!(messages_refused(json!({"model": "m", "messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]}))
        .contains("id"));
    assert!(messages_refused(
        json!({"model": "m", "messages": user, "tools": [{"type": "bash_20250124", "name": "bash"}]})
    )
    .contains("bash_20250124"));
    let c = messages(
        json!({"model": "m", "max_tokens": 9, "messages": user, "tools": [{"name": "f"},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]}),
    )
    .unwrap();
    assert_eq!(c.tools.iter().map(|t| t.name()).collect::<Vec<_>>(), ["f"]);
    assert!(
        messages_refused(json!({"model": "m", "messages": user, "tools": [{"name": "a"}],
        "tool_choice": {"type": "tool", "name": "zz"}}))
        .contains("zz")
    );
    assert!(
        messages_refused(json!({"model": "m", "messages": user, "thinking": {"type": "sometimes"}}))
            .contains("thinking")
    );
    let e = messages_refused(
        json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "tool_result",
        "tool_use_id": "t", "content": [{"type": "search_result"}]}]}]}),
    );
    assert!(
        e.contains("messages[0]: tool_result: ") && e.contains("search_result"),
        "{e}"
    );
    let e = messages_refused(json!({"model": "m", "messages": user, "system": [{"type": "document"}]}));
    assert!(e.starts_with("system: ") && e.contains("document"), "{e}");
}
