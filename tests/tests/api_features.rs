//! Request features through a live daemon, on the tiny fixture model (noise replies, so the
//! checks are about how replies are split, counted and shown): media marker tokens render as
//! nothing while end-of-turn tokens stop, logprobs on the three chat/generate APIs, thinking split
//! from content by a thinking template, images refused on a text-only model, SIGTERM during a
//! stream, a Unix socket (HTTP, admin calls and `ollamars run`), and `/api/create` with `quantize`.
//!
//! Where a test needs the model to produce a particular token, it writes a copy of the tiny
//! model with one token's text replaced ([`retoken`]): the weights are the same, so the model
//! picks the same ids, and the replaced text decides what the daemon makes of them.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ollamars_tests::daemon::{metric_sample, ndjson, ollamars_bin, sse_data, wait_for};
use ollamars_tests::{models, Daemon};
use serde_json::{json, Value};

#[path = "../../engine/tests/models/retoken.rs"]
mod retoken;

use retoken::{retoken, NORMAL, USER_DEFINED};

fn tiny_daemon() -> Daemon {
    let d = Daemon::start();
    d.create_model("tiny", &models::tiny_llama());
    d
}

/// Greedy decoding of `n` tokens.
fn greedy(n: i64) -> Value {
    json!({"temperature": 0, "num_predict": n, "seed": 1})
}

/// The prompt and generated token ids of a final `/api/generate` reply (from `context`).
fn split_context(reply: &Value) -> (Vec<u32>, Vec<u32>) {
    let ctx: Vec<u32> = reply["context"]
        .as_array()
        .unwrap_or_else(|| panic!("no context in {reply}"))
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let n = reply["prompt_eval_count"].as_u64().unwrap() as usize;
    (ctx[..n].to_vec(), ctx[n..].to_vec())
}

/// Indices of generated tokens that appear neither in the prompt nor earlier in the reply:
/// renaming one changes nothing before it.
fn fresh_positions(prompt: &[u32], generated: &[u32]) -> Vec<usize> {
    (0..generated.len())
        .filter(|&i| !prompt.contains(&generated[i]) && !generated[..i].contains(&generated[i]))
        .collect()
}

/// The concatenated `bytes` of logprobs items, skipping items whose token is in `skip`.
fn logprob_bytes(items: &[Value], skip: &[&str]) -> Vec<u8> {
    items
        .iter()
        .filter(|i| !skip.contains(&i["token"].as_str().unwrap()))
        .flat_map(|i| {
            i["bytes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn media_markers_show_as_nothing_and_end_of_turn_tokens_stop() {
    let d = tiny_daemon();
    let req = |model: &str| {
        json!({"model": model, "prompt": "The capital of France is", "stream": false,
            "options": greedy(12), "logprobs": true})
    };
    let first = d.post_ok("/api/generate", &req("tiny"));
    let (prompt, gen) = split_context(&first);
    let fresh = fresh_positions(&prompt, &gen);
    assert!(fresh.len() >= 3, "too few distinct tokens in {gen:?}");
    let (marker, end) = (fresh[0], fresh[2]);

    let file = d.temp_dir().join("markers.gguf");
    retoken(
        &models::tiny_llama(),
        &file,
        &[
            (gen[marker], "<start_of_image>", USER_DEFINED),
            (gen[end], "<end_of_turn>", NORMAL),
        ],
    );
    d.create_model("markers", &file);
    let r = d.post_ok("/api/generate", &req("markers"));
    let (prompt2, gen2) = split_context(&r);
    assert_eq!(prompt2, prompt, "the prompt tokenizes as before");
    // The same tokens up to the end of turn, which ends the reply without showing.
    assert_eq!(gen2, gen[..end], "{r}");
    assert_eq!(r["done_reason"], "stop");
    let text = r["response"].as_str().unwrap();
    assert!(
        !text.contains("<start_of_image>") && !text.contains("<end_of_turn>"),
        "{text:?}"
    );
    // Logprobs still name every token, the marker and the end of turn included; the reply is
    // their text without those two.
    let items = r["logprobs"].as_array().unwrap();
    assert_eq!(items.len(), end + 1, "{r}");
    assert_eq!(items[marker]["token"], "<start_of_image>");
    assert_eq!(items[end]["token"], "<end_of_turn>");
    assert_eq!(
        String::from_utf8_lossy(&logprob_bytes(items, &["<start_of_image>", "<end_of_turn>"])),
        text
    );
    assert!(marker + 1 < end, "text follows the marker");
}

/// How many logprobs items a reply has: one per sampled token, the end-of-turn token that
/// stopped it included, which is what `eval_count` counts (as in Ollama).
fn n_logprobs(eval_count: &Value) -> usize {
    eval_count.as_u64().unwrap() as usize
}

/// Checks Ollama logprobs items: `n` of them, greedy picks the most likely of `top`
/// alternatives, and their bytes are the reply.
fn check_ollama_logprobs(items: &[Value], n: usize, top: usize, text: &str) {
    assert_eq!(items.len(), n, "{items:?}");
    for i in items {
        let lp = i["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0 && lp.is_finite(), "{i}");
        let alts = i["top_logprobs"].as_array().unwrap();
        assert_eq!(alts.len(), top, "{i}");
        assert_eq!(alts[0]["token"], i["token"], "greedy takes the most likely: {i}");
        assert!(alts
            .windows(2)
            .all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
    }
    assert_eq!(String::from_utf8_lossy(&logprob_bytes(items, &[])), text);
}

#[test]
fn logprobs_on_generate_chat_and_openai_chat() {
    let d = tiny_daemon();
    // /api/generate, single reply and stream.
    let body = json!({"model": "tiny", "prompt": "Once upon a time", "stream": false,
        "options": greedy(6), "logprobs": true, "top_logprobs": 3});
    let r = d.post_ok("/api/generate", &body);
    let n = n_logprobs(&r["eval_count"]);
    check_ollama_logprobs(
        r["logprobs"].as_array().unwrap(),
        n,
        3,
        r["response"].as_str().unwrap(),
    );
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let chunks = ndjson(d.post("/api/generate", &streamed));
    let items: Vec<Value> = chunks
        .iter()
        .filter_map(|c| c["logprobs"].as_array())
        .flatten()
        .cloned()
        .collect();
    let text: String = chunks.iter().filter_map(|c| c["response"].as_str()).collect();
    assert_eq!(text, r["response"].as_str().unwrap());
    check_ollama_logprobs(&items, n, 3, &text);
    // Without the flag there are none.
    let plain = d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "Once upon a time", "stream": false, "options": greedy(3)}),
    );
    assert!(plain.get("logprobs").is_none(), "{plain}");

    // /api/chat.
    let r = d.post_ok(
        "/api/chat",
        &json!({"model": "tiny", "messages": [{"role": "user", "content": "hello"}],
            "stream": false, "options": greedy(5), "logprobs": true, "top_logprobs": 2}),
    );
    let n = n_logprobs(&r["eval_count"]);
    check_ollama_logprobs(
        r["logprobs"].as_array().unwrap(),
        n,
        2,
        r["message"]["content"].as_str().unwrap(),
    );

    // /v1/chat/completions: OpenAI's shape, single reply and stream.
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 5, "temperature": 0, "seed": 1, "logprobs": true, "top_logprobs": 2});
    let r = d.post_ok("/v1/chat/completions", &body);
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    let n = n_logprobs(&r["usage"]["completion_tokens"]);
    check_ollama_logprobs(
        content,
        n,
        2,
        r["choices"][0]["message"]["content"].as_str().unwrap(),
    );
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let resp = d
        .client()
        .post(d.url("/v1/chat/completions"))
        .json(&streamed)
        .send()
        .unwrap();
    let mut items = Vec::new();
    let mut text = String::new();
    for data in sse_data(resp) {
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&data).unwrap();
        if let Some(c) = v["choices"][0]["logprobs"]["content"].as_array() {
            items.extend(c.iter().cloned());
        }
        text.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
    }
    check_ollama_logprobs(&items, n, 2, &text);
    // Without `top_logprobs` each item still has the list OpenAI's schema requires, empty.
    let mut no_top = body.clone();
    no_top.as_object_mut().unwrap().remove("top_logprobs");
    let r = d.post_ok("/v1/chat/completions", &no_top);
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert!(!content.is_empty());
    for i in content {
        assert_eq!(i["top_logprobs"], json!([]), "{i}");
    }
    // Out of range is the client's error.
    let mut bad = body.clone();
    bad["top_logprobs"] = json!(21);
    assert_eq!(d.post("/v1/chat/completions", &bad).status(), 400);

    // /v1/completions: parallel lists, the same whole and streamed.
    let body = json!({"model": "tiny", "prompt": "Once upon a time", "max_tokens": 5,
        "temperature": 0, "seed": 1, "logprobs": 2});
    let r = d.post_ok("/v1/completions", &body);
    let whole = &r["choices"][0]["logprobs"];
    let n = whole["tokens"].as_array().unwrap().len();
    assert!(n > 0, "{r}");
    assert_eq!(whole["token_logprobs"].as_array().unwrap().len(), n);
    assert_eq!(whole["top_logprobs"].as_array().unwrap().len(), n);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let mut tokens = Vec::new();
    for data in sse_data(d.post("/v1/completions", &streamed)) {
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&data).unwrap();
        if let Some(t) = v["choices"][0]["logprobs"]["tokens"].as_array() {
            tokens.extend(t.iter().cloned());
        }
    }
    assert_eq!(&Value::Array(tokens), &whole["tokens"]);
}

/// A Qwen3/DeepSeek-R1-style Modelfile template: past thinking inside `<think>` tags, and the
/// new turn opened inside `<think>` when thinking is on.
const THINKING_TEMPLATE: &str = "{{- range .Messages }}{{ if eq .Role \"user\" }}USER: {{ .Content }}\n\
{{ else if eq .Role \"assistant\" }}ASSISTANT: {{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}\n\
{{ end }}{{ end }}ASSISTANT: {{ if .Think }}<think>\n{{ end }}";

#[test]
fn think_splits_thinking_from_content_with_a_thinking_template() {
    let d = tiny_daemon();
    let make =
        |name: &str, file: &Path| d.create_model_with(name, file, json!({"template": THINKING_TEMPLATE}));
    make("thinker", &models::tiny_llama());
    let gen_req = |model: &str, think: bool| {
        json!({"model": model, "prompt": "Why is the sky blue?", "think": think, "stream": false,
            "options": greedy(12)})
    };
    // With no closing tag in the reply, all of it is thinking.
    let all = d.post_ok("/api/generate", &gen_req("thinker", true));
    assert_eq!(all["response"], "", "{all}");
    let all_thinking = all["thinking"].as_str().unwrap().to_string();
    assert!(!all_thinking.trim().is_empty(), "{all}");

    // Make a later token of that reply the closing tag: before it is thinking, after it content.
    let (prompt, gen) = split_context(&all);
    let fresh = fresh_positions(&prompt, &gen);
    let close = *fresh
        .iter()
        .find(|&&i| (3..gen.len() - 4).contains(&i))
        .expect("a fresh token mid-reply");
    let file = d.temp_dir().join("think.gguf");
    retoken(&models::tiny_llama(), &file, &[(gen[close], "</think>", NORMAL)]);
    make("thinker2", &file);
    let r = d.post_ok("/api/generate", &gen_req("thinker2", true));
    let thinking = r["thinking"].as_str().unwrap();
    let content = r["response"].as_str().unwrap();
    assert!(!thinking.trim().is_empty() && !content.trim().is_empty(), "{r}");
    assert!(
        !thinking.contains("</think>") && !content.contains("</think>"),
        "{r}"
    );
    assert!(
        all_thinking.starts_with(thinking.trim_end()),
        "{thinking:?} vs {all_thinking:?}"
    );
    assert!(
        all_thinking.trim_end().ends_with(content.trim_end()),
        "{content:?} vs {all_thinking:?}"
    );
    // Streaming sends the same split.
    let mut s = gen_req("thinker2", true);
    s["stream"] = json!(true);
    let chunks = ndjson(d.post("/api/generate", &s));
    let st: String = chunks.iter().filter_map(|c| c["thinking"].as_str()).collect();
    let sc: String = chunks.iter().filter_map(|c| c["response"].as_str()).collect();
    assert_eq!((st.as_str(), sc.as_str()), (thinking, content));

    // The same on /api/chat.
    let r = d.post_ok(
        "/api/chat",
        &json!({"model": "thinker2", "messages": [{"role": "user", "content": "Why is the sky blue?"}],
            "think": true, "stream": false, "options": greedy(12)}),
    );
    assert_eq!(r["message"]["thinking"].as_str(), Some(thinking), "{r}");
    assert_eq!(r["message"]["content"].as_str(), Some(content), "{r}");
    // And on /v1/responses: a reasoning item, then the message; the usage counts the tokens of
    // the thinking, its closing tag included.
    let r = d.post_ok(
        "/v1/responses",
        &json!({"model": "thinker2", "input": "Why is the sky blue?", "reasoning": {"effort": "high"},
            "temperature": 0, "max_output_tokens": 12, "options": {"seed": 1}}),
    );
    assert_eq!(r["output"][0]["type"], "reasoning", "{r}");
    assert_eq!(
        r["output"][0]["summary"][0]["text"].as_str(),
        Some(thinking),
        "{r}"
    );
    assert_eq!(
        r["output"][1]["content"][0]["text"].as_str(),
        Some(content),
        "{r}"
    );
    let details = &r["usage"]["output_tokens_details"];
    assert_eq!(details["reasoning_tokens"], close + 1, "{r}");

    // think false: the template does not open the tag and nothing is thinking.
    let off = d.post_ok("/api/generate", &gen_req("thinker2", false));
    assert!(off.get("thinking").is_none(), "{off}");
    assert!(!off["response"].as_str().unwrap().is_empty(), "{off}");
    let rendered = d.post_ok(
        "/api/generate",
        &json!({"model": "thinker2", "prompt": "hi", "think": false, "_debug_render_only": true}),
    );
    let text = rendered["_debug_info"]["rendered_template"].as_str().unwrap();
    assert!(text.ends_with("ASSISTANT: "), "{text:?}");
    // A model whose template cannot think refuses to.
    let e = d.post("/api/generate", &gen_req("tiny", true));
    assert_eq!(e.status(), 400);
    assert!(e.text().unwrap().contains("does not support thinking"));
}

/// A format constrains a thinking model's reply, not its thinking (as Ollama, which lets the
/// model think before it applies the format): the thinking is what it is without the format
/// and the reply follows the schema. The grammar used to start at the first token, inside the
/// thinking: the JSON came out as thinking and the reply was empty.
#[test]
fn a_format_constrains_the_reply_after_the_thinking() {
    let d = tiny_daemon();
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
    let ask = |model: &str, template: &str, format: Option<&Value>| {
        let mut body = json!({"model": model, "prompt": "Why is the sky blue?", "think": true,
            "stream": false, "template": template, "options": greedy(40)});
        if let Some(f) = format {
            body["format"] = f.clone();
        }
        d.post_ok("/api/generate", &body)
    };
    // Two templates: one opens the thinking in the prompt, in the other the model writes the
    // opening tag itself (a grammar must then let that token through).
    let writes_open = THINKING_TEMPLATE.replace("{{ if .Think }}<think>\n{{ end }}", "");
    for (name, template) in [("opened", THINKING_TEMPLATE), ("writes", writes_open.as_str())] {
        // A token the model writes early becomes the closing tag; with the second template
        // its first token becomes the opening one.
        let all = ask("tiny", template, None);
        let (prompt, gen) = split_context(&all);
        let fresh = fresh_positions(&prompt, &gen);
        let close = *fresh
            .iter()
            .find(|&&i| (3..12).contains(&i))
            .expect("a fresh token early in the reply");
        let mut renamed = vec![(gen[close], "</think>", NORMAL)];
        if name == "writes" {
            assert_eq!(fresh[0], 0, "the first token is in the prompt");
            renamed.push((gen[0], "<think>", USER_DEFINED));
        }
        let file = d.temp_dir().join(format!("{name}.gguf"));
        retoken(&models::tiny_llama(), &file, &renamed);
        d.create_model(name, &file);
        let free = ask(name, template, None);
        let thinking = free["thinking"].as_str().unwrap();
        assert!(!thinking.trim().is_empty(), "{name}: {free}");
        for format in [json!("json"), schema.clone()] {
            let r = ask(name, template, Some(&format));
            assert_eq!(r["thinking"].as_str(), Some(thinking), "{name} {format}: {r}");
            let reply = r["response"].as_str().unwrap();
            let v: Value =
                serde_json::from_str(reply).unwrap_or_else(|e| panic!("{name} {format}: {e}: {r}"));
            assert!(v.is_object(), "{r}");
            if format == schema {
                assert!(v["ok"].is_boolean(), "{r}");
            }
        }
    }
}

#[test]
fn images_on_a_text_only_model_are_a_clear_400() {
    let d = tiny_daemon();
    let png =
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let cases = [
        (
            "/api/generate",
            json!({"model": "tiny", "prompt": "what is this?", "images": [png], "stream": false}),
        ),
        (
            "/api/chat",
            json!({"model": "tiny", "stream": false,
                "messages": [{"role": "user", "content": "what is this?", "images": [png]}]}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}}]}]}),
        ),
    ];
    for (path, body) in cases {
        let r = d.post(path, &body);
        assert_eq!(r.status(), 400, "{path}");
        let v: Value = r.json().unwrap();
        let msg = if path.starts_with("/v1") {
            v["error"]["message"].as_str().unwrap().to_string()
        } else {
            v["error"].as_str().unwrap().to_string()
        };
        assert!(
            msg.contains("\"tiny\" does not support images") && msg.contains("text-only"),
            "{path}: {msg}"
        );
    }
    // Nothing was loaded for them.
    let ps = d.get("/api/ps").json::<Value>().unwrap();
    assert_eq!(ps["models"].as_array().unwrap().len(), 0, "{ps}");
}

#[test]
fn sigterm_during_a_stream_exits_zero_promptly() {
    let mut d = tiny_daemon();
    let resp = d
        .client()
        .post(d.url("/api/generate"))
        .json(
            &json!({"model": "tiny", "prompt": "Tell me a long story", "stream": true,
            "options": {"num_predict": -1, "num_ctx": 4096, "temperature": 0}}),
        )
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut lines = BufReader::new(resp).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("\"done\":false"), "{first}");
    // Keep reading, as a client does (a stream nobody reads would hold the daemon up).
    let reader = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<String>>());
    // A request without streaming, waiting for the busy slot or running beside the stream.
    let (url, client) = (d.url("/api/generate"), d.client().clone());
    let unstreamed = std::thread::spawn(move || {
        let r = client
            .post(url)
            .json(
                &json!({"model": "tiny", "prompt": "Another story", "stream": false,
                "options": {"num_predict": -1, "num_ctx": 4096, "temperature": 0}}),
            )
            .send()
            .unwrap();
        (r.status(), r.text().unwrap())
    });
    wait_for(30, "the second request to wait for the slot", || {
        let metrics = d.get("/metrics").text().unwrap();
        metric_sample(&metrics, "ollamars_queue_depth{model=\"tiny:latest\"}") == Some(1.0)
    });
    let t0 = Instant::now();
    let status = d
        .terminate(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no exit 30 s after SIGTERM:\n{}", d.log()));
    let took = t0.elapsed();
    assert!(status.success(), "{status}:\n{}", d.log());
    // The stream ended (finished or cut by the cancel), it did not hang.
    let rest = reader.join().unwrap();
    let last = rest.last().cloned().unwrap_or(first);
    assert!(
        last.contains("\"done\":false") || last.contains("\"done\":true") || last.contains("error"),
        "{last}"
    );
    // A grace period (5 s), then in-flight requests are cancelled.
    assert!(took < Duration::from_secs(15), "exit took {took:?}");
    // Turned away by the shutdown at once, not the client's fault: a 503 to retry (it was a
    // 500 at the end of the grace period; a request cut while running was a 400).
    let (status, body) = unstreamed.join().unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("the server is shutting down"), "{body}");
}

/// One HTTP/1.1 request over a Unix socket; returns the status code and body.
fn unix_request(sock: &Path, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn a_unix_socket_serves_generate_and_the_cli() {
    // The model is created through a TCP daemon on the same store, with a short reply length
    // for `ollamars run` (which sends no options).
    let tcp = Daemon::start();
    tcp.create_model_with(
        "tiny",
        &models::tiny_llama(),
        json!({"parameters": {"num_predict": 8}}),
    );
    let models_dir = tcp.models_dir().to_path_buf();
    let sock = tcp.temp_dir().join("ollamars.sock");
    let log = std::fs::File::create(tcp.temp_dir().join("unix.log")).unwrap();
    let config = tcp.temp_dir().join("unix.yaml");
    std::fs::write(&config, "").unwrap();
    let mut cmd = Command::new(ollamars_bin());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OLLAMARS_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .args(["serve", "--config"])
        .arg(&config)
        .env("OLLAMARS_HOST", format!("unix://{}", sock.display()))
        .env("OLLAMARS_MODELS", &models_dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "no socket at {}", sock.display());
        assert!(child.try_wait().unwrap().is_none(), "the daemon exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = || -> Result<(), String> {
        let (status, body) = unix_request(&sock, "GET", "/", "");
        if status != 200 || !body.contains("Ollama is running") {
            return Err(format!("GET /: {status} {body}"));
        }
        let req = json!({"model": "tiny", "prompt": "hello", "stream": false, "options": greedy(4)});
        let (status, body) = unix_request(&sock, "POST", "/api/generate", &req.to_string());
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if status != 200 || v["done"] != true || v["response"].as_str().is_none() {
            return Err(format!("generate: {status} {body}"));
        }
        // Admin endpoints answer a Unix-socket peer (file permissions decide who that is).
        let (status, body) = unix_request(
            &sock,
            "POST",
            "/api/copy",
            r#"{"source":"tiny","destination":"tiny2"}"#,
        );
        if status != 200 {
            return Err(format!("copy: {status} {body}"));
        }
        // The CLI generates through OLLAMARS_HOST=unix://... (cli_commands covers list and
        // create there).
        let host = format!("unix://{}", sock.display());
        let out = Command::new(ollamars_bin())
            .args(["run", "tiny", "hello"])
            .env("OLLAMARS_HOST", &host)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() || out.stdout.is_empty() {
            return Err(format!(
                "ollamars run: {} {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    };
    let result = run();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    let log = std::fs::read_to_string(tcp.temp_dir().join("unix.log")).unwrap_or_default();
    if let Err(e) = result {
        panic!("{e}\n{log}");
    }
    assert!(status.success(), "{status}\n{log}");
    assert!(!sock.exists(), "the socket is removed on exit");
}

#[test]
fn create_with_quantize_makes_the_requested_type() {
    let d = Daemon::start();
    let f32_model = models::tiny("tiny-llama-spm-e64-f32.gguf");
    let digest = d.upload_blob(&f32_model);
    let resp = d.post(
        "/api/create",
        &json!({"model": "tiny-q8", "files": {"model.gguf": digest}, "quantize": "q8_0"}),
    );
    assert_eq!(resp.status(), 200);
    let progress = ndjson(resp);
    let statuses: Vec<&str> = progress.iter().filter_map(|p| p["status"].as_str()).collect();
    assert!(statuses.iter().any(|s| s.contains("quantiz")), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&"success"), "{progress:?}");
    let show = d.post_ok("/api/show", &json!({"model": "tiny-q8"}));
    assert_eq!(
        show["details"]["quantization_level"], "Q8_0",
        "{}",
        show["details"]
    );
    assert_eq!(
        show["model_info"]["general.file_type"], 7,
        "llama_ftype MOSTLY_Q8_0"
    );
    // The stored weights are Q8_0 and about a quarter of the F32 file.
    let tags = d.get("/api/tags").json::<Value>().unwrap();
    let size = tags["models"][0]["size"].as_u64().unwrap();
    let f32_size = std::fs::metadata(&f32_model).unwrap().len();
    assert!(size < f32_size / 2, "{size} vs {f32_size}");
    // It runs.
    let r = d.post_ok(
        "/api/generate",
        &json!({"model": "tiny-q8", "prompt": "hi", "stream": false, "options": greedy(3)}),
    );
    assert!(
        r["done"] == true && r["eval_count"].as_u64().is_some_and(|n| (1..=3).contains(&n)),
        "{r}"
    );
    // An unknown type is refused and creates nothing.
    let r = d.post(
        "/api/create",
        &json!({"model": "tiny-bad", "files": {"model.gguf": digest}, "quantize": "q9_9", "stream": false}),
    );
    assert_eq!(r.status(), 400);
    let tags = d.get("/api/tags").json::<Value>().unwrap();
    assert_eq!(tags["models"].as_array().unwrap().len(), 1, "{tags}");
}

/// `/api/create` refuses, with a 400 and nothing created, what would make a broken model: a
/// MESSAGE whose role or content is not a string (stored as an empty message before) and a
/// TEMPLATE that does not compile (every request to the model failed with 500 before).
#[test]
fn create_refuses_what_no_request_could_use() {
    let d = tiny_daemon();
    let bad = [
        json!({"messages": [{"role": "user", "content": 5}]}),
        json!({"messages": [{"role": 1, "content": "hi"}]}),
        json!({"messages": "hi"}),
        json!({"template": "{{ .Prompt"}),
    ];
    for fields in bad {
        let mut req = json!({"model": "broken", "from": "tiny", "stream": false});
        req.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        let r = d.post("/api/create", &req);
        assert_eq!(r.status(), 400, "{fields}");
        let body = r.json::<Value>().unwrap();
        assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}");
    }
    let tags = d.get("/api/tags").json::<Value>().unwrap();
    assert_eq!(tags["models"].as_array().unwrap().len(), 1, "{tags}");
    // Well-formed messages are kept as given.
    let req = json!({"model": "ok", "from": "tiny", "stream": false,
        "messages": [{"role": "User", "content": "hi"}, {"role": "assistant"}]});
    d.post_ok("/api/create", &req);
    let show = d.post_ok("/api/show", &json!({"model": "ok"}));
    assert_eq!(
        show["messages"],
        json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]),
        "{show}"
    );
}
