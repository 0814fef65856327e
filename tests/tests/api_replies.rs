//! Real replies through a live daemon: Gemma 3 270M (pretrained, no chat template) continues
//! text; Qwen2.5-Coder 0.5B Instruct (a chat template with tools) calls tools, on both APIs.

use ollamars_tests::daemon::{ndjson, sse_data};
use ollamars_tests::{models, Daemon};
use serde_json::{json, Value};

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_current_weather",
        "description": "Get the current weather for a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "The city name"}},
                       "required": ["city"]}}}])
}

/// Gemma 3 270M here is the pretrained model without a chat template: it continues text.
#[test]
fn gemma_continues_text() {
    let d = Daemon::start();
    d.create_model("gemma", &models::gemma());
    let r = d.post_ok(
        "/api/chat",
        &json!({"model": "gemma", "stream": false,
                "messages": [{"role": "user", "content": "What is the capital of France? Answer in one word."}],
                "options": {"temperature": 0, "num_predict": 16}}),
    );
    let answer = r["message"]["content"].as_str().unwrap();
    assert!(answer.contains("Paris"), "{r}");
    let r = d.post_ok(
        "/v1/completions",
        &json!({"model": "gemma", "prompt": "The capital of Italy is", "max_tokens": 8, "temperature": 0}),
    );
    assert!(
        r["choices"][0]["text"].as_str().unwrap().contains("capital"),
        "{r}"
    );
    assert_eq!(r["usage"]["completion_tokens"], 8, "{r}");
}

#[test]
fn qwen_calls_tools_on_both_apis() {
    let d = Daemon::start();
    d.create_model("qwen", &models::qwen());
    // The 0.5B model answers with a bare JSON call, without the <tool_call> marker its template
    // asks for: the parser takes it as a call all the same.
    let ask = json!([{"role": "user", "content": "What is the weather in Paris right now?"}]);
    let r = d.post_ok(
        "/api/chat",
        &json!({"model": "qwen", "stream": false, "messages": ask, "tools": weather_tool(),
                "options": {"temperature": 0, "num_predict": 64}}),
    );
    let call = &r["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_current_weather", "{r}");
    assert!(
        call["arguments"]["city"].as_str().unwrap().contains("Paris"),
        "{r}"
    );

    // Streaming: the call arrives whole in one chunk.
    let lines = ndjson(d.post(
        "/api/chat",
        &json!({"model": "qwen", "messages": ask, "tools": weather_tool(),
                "options": {"temperature": 0, "num_predict": 64}}),
    ));
    let calls: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"]["tool_calls"].is_array())
        .collect();
    assert_eq!(calls.len(), 1, "{lines:?}");
    assert_eq!(
        calls[0]["message"]["tool_calls"][0]["function"]["name"],
        "get_current_weather"
    );

    // The tool's answer goes back as a `tool` message; the model uses it.
    let r = d.post_ok(
        "/api/chat",
        &json!({"model": "qwen", "stream": false, "tools": weather_tool(),
                "messages": [{"role": "user", "content": "What is the weather in Paris right now?"},
                             r["message"],
                             {"role": "tool", "content": "18 degrees Celsius and sunny"}],
                "options": {"temperature": 0, "num_predict": 48}}),
    );
    assert_eq!(r["done"], true, "{r}");

    // OpenAI: arguments as a JSON string, finish_reason tool_calls, and in the stream.

    let body = json!({"model": "qwen", "temperature": 0, "max_tokens": 64,
                      "messages": ask, "tools": weather_tool()});
    let r = d.post_ok("/v1/chat/completions", &body);
    let choice = &r["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{r}");
    let tc = &choice["message"]["tool_calls"][0];
    assert_eq!(tc["type"], "function");
    assert!(tc["id"].as_str().is_some_and(|s| !s.is_empty()), "{tc}");
    assert_eq!(tc["function"]["name"], "get_current_weather");
    let args: Value = serde_json::from_str(tc["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].as_str().unwrap().contains("Paris"), "{args}");

    let mut stream = body.clone();
    stream["stream"] = json!(true);
    let data = sse_data(d.post("/v1/chat/completions", &stream));
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .any(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_current_weather"),
        "{data:?}"
    );
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "tool_calls"));
}

/// `format` with a JSON schema (Ollama) and `response_format` json_schema (OpenAI) constrain the
/// reply so that it parses and validates; a schema keyword we cannot enforce is a 400 naming it.
#[test]
fn qwen_replies_follow_a_json_schema_on_both_apis() {
    let d = Daemon::start();
    d.create_model("qwen", &models::qwen());
    let schema = json!({"type": "object",
                        "properties": {"city": {"type": "string", "maxLength": 20},
                                       "sunny": {"type": "boolean"},
                                       "rating": {"type": "integer", "enum": [1, 2, 3]}},
                        "required": ["city", "sunny", "rating"],
                        "additionalProperties": false});
    let ask = json!([{"role": "user", "content": "Describe the weather in Paris as JSON."}]);
    let check = |text: &str| {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        let o = v.as_object().unwrap_or_else(|| panic!("not an object: {text:?}"));
        assert_eq!(o.len(), 3, "{text:?}");
        assert!(o["city"].as_str().unwrap().chars().count() <= 20, "{text:?}");
        assert!(o["sunny"].is_boolean(), "{text:?}");
        assert!([1, 2, 3].contains(&o["rating"].as_i64().unwrap()), "{text:?}");
    };
    let r = d.post_ok(
        "/api/chat",
        &json!({"model": "qwen", "stream": false, "messages": ask, "format": schema,
                "options": {"temperature": 0, "num_predict": 96}}),
    );
    assert_eq!(r["done_reason"], "stop", "{r}");
    check(r["message"]["content"].as_str().unwrap());

    let r = d.post_ok(
        "/v1/chat/completions",
        &json!({"model": "qwen", "messages": ask, "max_tokens": 96, "temperature": 0, "seed": 7,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "weather", "schema": schema}}}),
    );
    check(r["choices"][0]["message"]["content"].as_str().unwrap());

    // `format: "json"` gives an object that parses.
    let r = d.post_ok(
        "/api/generate",
        &json!({"model": "qwen", "stream": false, "format": "json",
                "prompt": "Give the weather in Paris as a JSON object with the keys city and sunny.",
                "options": {"temperature": 0, "num_predict": 96}}),
    );
    assert_eq!(r["done_reason"], "stop", "{r}");
    let v: Value = serde_json::from_str(r["response"].as_str().unwrap()).unwrap();
    assert!(v.is_object(), "{r}");

    let bad = json!({"type": "object", "properties": {"a": {"type": "string", "not": {"const": "x"}}}});
    let resp = d.post(
        "/api/chat",
        &json!({"model": "qwen", "stream": false, "messages": ask, "format": bad}),
    );
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().unwrap();
    assert!(body["error"].as_str().unwrap().contains("'not'"), "{body}");
}

fn clock_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_time",
        "description": "Get the current time in a time zone",
        "parameters": {"type": "object",
                       "properties": {"timezone": {"type": "string", "maxLength": 40}},
                       "required": ["timezone"]}}})
}

/// OpenAI's `tool_choice`: `"required"` and a named function constrain decoding to calls in the
/// model's syntax, with arguments that follow the tool's schema, even when the model would
/// rather answer in words; bad choices are 400s before any model is loaded.
#[test]
fn qwen_tool_choice_requires_calls() {
    let d = Daemon::start();
    d.create_model("qwen", &models::qwen());
    let mut tools = weather_tool();
    tools.as_array_mut().unwrap().push(clock_tool());
    let ask = json!([{"role": "user", "content": "Say hello to me."}]);
    let chat = |choice: Value| {
        d.post_ok(
            "/v1/chat/completions",
            &json!({"model": "qwen", "messages": ask, "tools": tools, "tool_choice": choice,
                    "max_tokens": 64, "temperature": 0}),
        )
    };
    // Offered no tools ("none"), the model greets in words.
    let none = chat(json!("none"));
    assert_eq!(none["choices"][0]["finish_reason"], "stop", "{none}");
    assert!(none["choices"][0]["message"]["tool_calls"].is_null(), "{none}");
    // Left to itself ("auto"), it may do either: which one is the model's near-tie (greedy Qwen
    // 0.5B flips between greeting and calling the weather tool with the kernels' rounding), so
    // only the shape is checked.
    let free = chat(json!("auto"));
    let reason = free["choices"][0]["finish_reason"].as_str().unwrap_or_default();
    assert!(matches!(reason, "stop" | "tool_calls"), "{free}");
    assert_eq!(
        free["choices"][0]["message"]["tool_calls"].is_null(),
        reason == "stop",
        "{free}"
    );

    let call = |r: &Value| -> (String, Value) {
        let choice = &r["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{r}");
        let f = &choice["message"]["tool_calls"][0]["function"];
        let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
        (f["name"].as_str().unwrap().to_string(), args)
    };
    let (name, args) = call(&chat(json!("required")));
    match name.as_str() {
        "get_current_weather" => assert!(args["city"].is_string(), "{args}"),
        "get_time" => assert!(args["timezone"].is_string(), "{args}"),
        other => panic!("called {other}"),
    }
    let (name, args) = call(&chat(
        json!({"type": "function", "function": {"name": "get_time"}}),
    ));
    assert_eq!(name, "get_time");
    assert!(args["timezone"].as_str().unwrap().chars().count() <= 40, "{args}");
    assert_eq!(args.as_object().unwrap().len(), 1, "{args}");

    for (body, says) in [
        (
            json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "nope",
        ),
        (json!({"tool_choice": "required"}), "only allowed when 'tools'"),
        (json!({"tools": tools, "tool_choice": "always"}), "tool_choice"),
    ] {
        let mut body = body;
        body["model"] = json!("qwen");
        body["messages"] = ask.clone();
        let resp = d.post("/v1/chat/completions", &body);
        assert_eq!(resp.status().as_u16(), 400, "{body}");
        let err: Value = resp.json().unwrap();
        assert!(err.to_string().contains(says), "{err}");
    }
}

/// A structured output format with tools: a required call wins (instructor sends both, as OpenAI
/// accepts), and otherwise the reply is the requested JSON, never taken for a call even when it
/// names a tool.
#[test]
fn qwen_structured_output_with_tools() {
    let d = Daemon::start();
    d.create_model("qwen", &models::qwen());
    let tools = json!([clock_tool()]);
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}},
                        "required": ["name"], "additionalProperties": false});
    let ask = json!([{"role": "user", "content": "Reply with the JSON {\"name\": \"get_time\"} exactly."}]);
    let r = d.post_ok(
        "/v1/chat/completions",
        &json!({"model": "qwen", "messages": ask, "tools": tools, "max_tokens": 48, "temperature": 0,
                "tool_choice": {"type": "function", "function": {"name": "get_time"}},
                "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}),
    );
    assert_eq!(r["choices"][0]["finish_reason"], "tool_calls", "{r}");
    assert_eq!(
        r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time",
        "{r}"
    );
    let flat = json!([{"type": "function", "name": "get_time",
                       "parameters": clock_tool()["function"]["parameters"]}]);
    let r = d.post_ok(
        "/v1/responses",
        &json!({"model": "qwen", "input": ask, "tools": flat, "max_output_tokens": 48, "temperature": 0,
                "tool_choice": {"type": "function", "name": "get_time"},
                "text": {"format": {"type": "json_schema", "name": "n", "schema": schema}}}),
    );
    let calls: Vec<&Value> = r["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["type"] == "function_call")
        .collect();
    assert_eq!(calls.len(), 1, "{r}");
    assert_eq!(calls[0]["name"], "get_time", "{r}");

    for stream in [false, true] {
        let body = json!({"model": "qwen", "messages": ask, "tools": tools, "max_tokens": 48,
                          "temperature": 0, "stream": stream,
                          "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}});
        let resp = d.post("/v1/chat/completions", &body);
        assert_eq!(resp.status().as_u16(), 200);
        let (content, calls) = if stream {
            let events: Vec<Value> = sse_data(resp)
                .iter()
                .filter(|d| *d != "[DONE]")
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            let text: String = events
                .iter()
                .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
                .collect();
            let calls = events
                .iter()
                .any(|e| !e["choices"][0]["delta"]["tool_calls"].is_null());
            (text, calls)
        } else {
            let r: Value = resp.json().unwrap();
            let m = &r["choices"][0]["message"];
            (
                m["content"].as_str().unwrap_or_default().to_string(),
                !m["tool_calls"].is_null(),
            )
        };
        assert!(!calls, "stream {stream}: {content}");
        let answer: Value = serde_json::from_str(&content).unwrap();
        assert!(answer["name"].is_string(), "{answer}");
    }
}

/// The end-of-turn token that ends a reply is counted, as Ollama and llama.cpp count it: a reply
/// that is nothing but that token has an `eval_count` of 1, not none (ollama-rs then dropped
/// all of the reply's statistics), on every API.
#[test]
fn qwen_counts_the_end_token() {
    let d = Daemon::start();
    d.create_model("qwen", &models::qwen());
    let done = json!([{"role": "user", "content": "Say only OK"}, {"role": "assistant", "content": "OK"}]);
    let r = d.post_ok(
        "/api/chat",
        &json!({"model": "qwen", "messages": done, "stream": false,
                "options": {"temperature": 0, "num_predict": 16}}),
    );
    assert_eq!(
        (&r["message"]["content"], &r["done_reason"]),
        (&json!(""), &json!("stop")),
        "{r}"
    );
    assert_eq!(r["eval_count"], 1, "{r}");
    let r = d.post_ok(
        "/v1/chat/completions",
        &json!({"model": "qwen", "messages": done, "max_tokens": 16, "temperature": 0}),
    );
    assert_eq!(r["usage"]["completion_tokens"], 1, "{r}");
    // A reply with words: one count per token, its end included (the logprobs list every one).
    let r = d.post_ok(
        "/api/chat",
        &json!({"model": "qwen", "messages": [{"role": "user", "content": "Say hello."}], "stream": false,
                "logprobs": true, "options": {"temperature": 0, "num_predict": 32}}),
    );
    assert_eq!(r["done_reason"], "stop", "{r}");
    let items = r["logprobs"].as_array().unwrap().len();
    assert!(items > 1, "{r}");
    assert_eq!(r["eval_count"], items, "{r}");
}

/// Options Ollama removed from its engine (Mirostat, tfs_z, penalize_newline) are still accepted
/// by /api/generate; Mirostat samples (with a seed, the same text twice).
#[test]
fn gemma_accepts_removed_options() {
    let d = Daemon::start();
    d.create_model("gemma", &models::gemma());
    let generate = || {
        d.post_ok(
            "/api/generate",
            &json!({"model": "gemma", "stream": false, "prompt": "Once upon a time",
                    "options": {"mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2,
                                "tfs_z": 0.95, "penalize_newline": false, "seed": 11,
                                "num_predict": 12}}),
        )
    };
    let (a, b) = (generate(), generate());
    assert_eq!(a["eval_count"], 12, "{a}");
    assert!(!a["response"].as_str().unwrap().is_empty(), "{a}");
    assert_eq!(a["response"], b["response"]);
}
