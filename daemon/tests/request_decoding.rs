//! Request decoding without a server: the `decode_*` entry points run exactly what the handlers
//! run before a model is touched (they are what fuzz/fuzz_targets/http_request.rs drives).
//! Inputs the fuzzer found crashing are kept at the end of this file.

use daemon::api::{decode_chat, decode_generate};
use daemon::openai::{decode_chat_completion, decode_completion};
use engine::chat::Think;
use serde_json::json;

fn msg<T>(r: Result<T, daemon::error::ApiError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => {
            assert_eq!(e.status.as_u16(), 400, "{}", e.message);
            e.message
        }
    }
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
