//! The Ollama API's wire format against a live daemon, on the tiny fixture model (replies are
//! noise, but shapes, counts, status codes and model management are real).

use ollamars_tests::daemon::{ndjson, sse_data};
use ollamars_tests::{models, Daemon};
use serde_json::{json, Value};

fn tiny_daemon() -> Daemon {
    let d = Daemon::start();
    d.create_model("tiny", &models::tiny_llama());
    d
}

fn nonzero(v: &Value, key: &str) -> u64 {
    let n = v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}"));
    assert!(n > 0, "{key} is 0 in {v}");
    n
}

#[test]
fn generate_streams_ndjson_with_final_metrics_and_context() {
    let d = tiny_daemon();
    let r = d.post(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "The quick brown fox",
                "options": {"num_predict": 5, "temperature": 0}}),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    let lines = ndjson(r);
    let (last, chunks) = lines.split_last().unwrap();
    assert!(!chunks.is_empty(), "{lines:?}");
    for c in chunks {
        assert_eq!(c["model"], "tiny");
        assert_eq!(c["done"], false, "{c}");
        assert!(c["response"].is_string(), "{c}");
        assert!(c["created_at"].as_str().unwrap().contains('T'), "{c}");
    }
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "length");
    assert_eq!(last["eval_count"], 5);
    for key in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_duration",
    ] {
        nonzero(last, key);
    }
    assert!(nonzero(last, "total_duration") >= nonzero(last, "eval_duration"));
    let context: Vec<u64> = serde_json::from_value(last["context"].clone()).unwrap();
    // The prompt's tokens (BOS + 5 for this vocabulary) and the 5 generated ones.
    assert_eq!(
        context.len() as u64,
        last["prompt_eval_count"].as_u64().unwrap() + 5,
        "{last}"
    );

    // Continuing from `context` puts it in front of the new prompt: the new context extends it.
    let next = d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": " and", "context": context, "stream": false,
                "options": {"num_predict": 2, "temperature": 0}}),
    );
    let next_ctx: Vec<u64> = serde_json::from_value(next["context"].clone()).unwrap();
    assert!(next_ctx.len() > context.len() + 2, "{next}");
    assert_eq!(next_ctx[..context.len()], context[..], "{next}");

    // As in Ollama, raw mode returns no context.
    let raw = d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "x", "raw": true, "stream": false,
                "options": {"num_predict": 1}}),
    );
    assert!(raw.get("context").is_none(), "{raw}");
}

#[test]
fn chat_stream_and_single_reply_shapes() {
    let d = tiny_daemon();
    let body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                      "options": {"num_predict": 4, "seed": 7}});
    let lines = ndjson(d.post("/api/chat", &body));
    let (last, chunks) = lines.split_last().unwrap();
    let mut streamed = String::new();
    for c in chunks {
        assert_eq!(c["message"]["role"], "assistant", "{c}");
        assert_eq!(c["done"], false);
        streamed.push_str(c["message"]["content"].as_str().unwrap());
    }
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "length");
    assert_eq!(last["eval_count"], 4);
    assert!(last.get("context").is_none(), "chat has no context: {last}");

    // The same seed without streaming gives the same text in one object.
    let mut single = body.clone();
    single["stream"] = json!(false);
    let one = d.post_ok("/api/chat", &single);
    assert_eq!(one["done"], true);
    assert_eq!(one["message"]["content"].as_str().unwrap(), streamed);
    assert_eq!(one["eval_count"], 4);
}

#[test]
fn empty_prompt_loads_and_keep_alive_zero_unloads() {
    let d = tiny_daemon();
    let ps = |d: &Daemon| d.get("/api/ps").json::<Value>().unwrap()["models"].clone();
    assert_eq!(ps(&d).as_array().unwrap().len(), 0);

    let r = d.post_ok("/api/generate", &json!({"model": "tiny", "prompt": ""}));
    assert_eq!(r["done"], true);
    assert_eq!(r["done_reason"], "load");
    let loaded = ps(&d);
    assert_eq!(loaded.as_array().unwrap().len(), 1, "{loaded}");
    assert_eq!(loaded[0]["name"], "tiny:latest");
    nonzero(&loaded[0], "size");
    assert!(loaded[0]["expires_at"].as_str().unwrap().contains('T'));

    let r = d.post_ok(
        "/api/chat",
        &json!({"model": "tiny", "messages": [], "keep_alive": 0}),
    );
    assert_eq!(r["done_reason"], "unload");
    assert_eq!(r["message"]["role"], "assistant");
    // The unload happens as the answer is sent; give it a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ps(&d).as_array().unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "still loaded: {}", ps(&d));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn embed_and_legacy_embeddings() {
    let d = tiny_daemon();
    let r = d.post_ok(
        "/api/embed",
        &json!({"model": "tiny", "input": ["hello world", "goodbye"]}),
    );
    let embs = r["embeddings"].as_array().unwrap();
    assert_eq!(embs.len(), 2, "{r}");
    for e in embs {
        let v: Vec<f64> = serde_json::from_value(e.clone()).unwrap();
        assert_eq!(v.len(), 64);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "not normalized: {norm}");
    }
    assert_ne!(embs[0], embs[1]);
    assert!(r["prompt_eval_count"].as_u64().unwrap() >= 4, "{r}");

    let one = d.post_ok("/api/embed", &json!({"model": "tiny", "input": "hello world"}));
    assert_eq!(one["embeddings"][0], embs[0]);

    let legacy = d.post_ok(
        "/api/embeddings",
        &json!({"model": "tiny", "prompt": "hello world"}),
    );
    let v: Vec<f64> = serde_json::from_value(legacy["embedding"].clone()).unwrap();
    assert_eq!(v.len(), 64);
    // The legacy endpoint is not normalized (Ollama's EmbeddingsHandler): the same direction as
    // /api/embed's vector, at the pooled vector's own length.
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() > 1e-3, "normalized: {norm}");
    let e0: Vec<f64> = serde_json::from_value(embs[0].clone()).unwrap();
    for (a, b) in v.iter().zip(&e0) {
        assert!((a / norm - b).abs() < 1e-5, "{a} / {norm} vs {b}");
    }
}

#[test]
fn model_management_tags_show_copy_delete() {
    let d = tiny_daemon();
    let tags = d.get("/api/tags").json::<Value>().unwrap();
    let m = &tags["models"][0];
    assert_eq!(m["name"], "tiny:latest");
    assert_eq!(m["model"], "tiny:latest");
    assert!(m["digest"].as_str().unwrap().len() == 64, "{m}");
    assert_eq!(m["details"]["format"], "gguf");
    assert_eq!(m["details"]["family"], "llama");
    nonzero(m, "size");

    let show = d.post_ok("/api/show", &json!({"model": "tiny"}));
    assert_eq!(show["model_info"]["general.architecture"], "llama", "{show}");
    assert_eq!(show["model_info"]["llama.embedding_length"], 64);
    assert!(show["capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("completion")));
    // A request's `system` shows instead of the model's, an empty one does not (Ollama's CLI
    // always sends the field).
    let r = d.post_ok(
        "/api/create",
        &json!({"model": "terse", "from": "tiny", "system": "You are terse.", "stream": false}),
    );
    assert_eq!(r["status"], "success");
    for (asked, shown) in [("", "You are terse."), ("Be kind.", "Be kind.")] {
        let s = d.post_ok(
            "/api/show",
            &json!({"model": "terse", "system": asked, "template": ""}),
        );
        assert_eq!(s["system"], shown, "{s}");
    }
    assert_eq!(d.delete_model("terse").status(), 200);
    // The listing carries the same capabilities (Ollama's `/api/tags` does), twice alike (cached).
    for _ in 0..2 {
        let tags = d.get("/api/tags").json::<Value>().unwrap();
        assert_eq!(tags["models"][0]["capabilities"], show["capabilities"], "{tags}");
    }
    assert_eq!(show["details"]["quantization_level"], "Q8_0");
    // Without a template of its own the model renders with Ollama's default, and shows it.
    assert_eq!(show["template"], "{{ .Prompt }}", "{show}");
    // Tensor types spelled as Ollama spells them.
    let verbose = d.post_ok("/api/show", &json!({"model": "tiny", "verbose": true}));
    let types: Vec<&str> = verbose["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"Q8_0") && types.contains(&"F32"), "{types:?}");

    d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "x", "stream": false, "keep_alive": "10m",
                "options": {"num_predict": 1}}),
    );
    let loaded = |d: &Daemon| {
        d.get("/api/ps").json::<Value>().unwrap()["models"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(loaded(&d), 1);
    let r = d.post("/api/copy", &json!({"source": "tiny", "destination": "tiny2:v1"}));
    assert_eq!(r.status(), 200);
    let names: Vec<String> = d.get("/api/tags").json::<Value>().unwrap()["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"tiny2:v1".to_string()), "{names:?}");

    let r = d.delete_model("tiny2:v1");
    assert_eq!(r.status(), 200);
    // The copy's weights are the original's: deleting the copy leaves the model loaded.
    assert_eq!(loaded(&d), 1);
    let r = d.post("/api/show", &json!({"model": "tiny2:v1"}));
    assert_eq!(r.status(), 404);
    assert!(r.json::<Value>().unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("not found"));
    let r = d.delete_model("tiny2:v1");
    assert_eq!(r.status(), 404);
    // The original is still there and answers.
    d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "x", "stream": false, "options": {"num_predict": 1}}),
    );
    // Deleting the last name of the weights unloads them.
    assert_eq!(d.delete_model("tiny").status(), 200);
    assert_eq!(loaded(&d), 0);
}

#[test]
fn blobs_check_digests() {
    let d = Daemon::start();
    let zeros = format!("sha256:{}", "0".repeat(64));
    let r = d
        .client()
        .head(d.url(&format!("/api/blobs/{zeros}")))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
    // Bytes that do not hash to the digest in the path are refused and not stored.
    let r = d
        .client()
        .post(d.url(&format!("/api/blobs/{zeros}")))
        .body("not the right bytes")
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
    let err = r.json::<Value>().unwrap();
    assert!(
        err["error"].as_str().unwrap().contains("digest mismatch"),
        "{err}"
    );
    let r = d
        .client()
        .head(d.url(&format!("/api/blobs/{zeros}")))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
    // A malformed digest is a 400, never a path.
    let r = d
        .client()
        .head(d.url("/api/blobs/sha256:..%2F..%2Fetc%2Fpasswd"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
    // The right bytes are stored: 201, then HEAD finds them.
    let file = d.temp_dir().join("blob.bin");
    std::fs::write(&file, b"some bytes").unwrap();
    let digest = d.upload_blob(&file);
    let r = d
        .client()
        .head(d.url(&format!("/api/blobs/{digest}")))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// Reads one HTTP/1.1 response (head and a Content-Length body) from a kept-alive connection.
fn read_response(s: &mut std::net::TcpStream, head_request: bool) -> (u16, String) {
    use std::io::Read;
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).unwrap(),
            1,
            "connection closed after {:?}",
            String::from_utf8_lossy(&out)
        );
        out.push(byte[0]);
    }
    let head = String::from_utf8(out).unwrap();
    let status = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; if head_request { 0 } else { len }];
    s.read_exact(&mut body).unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A blob posted again (already stored) or to a malformed digest is answered without storing
/// anything, but its body is still read: the client's kept-alive connection serves its next
/// request (the HEAD a client sends after an upload) instead of being closed mid-body.
#[test]
fn early_blob_answers_keep_the_connection_usable() {
    use std::io::Write;
    let d = Daemon::start();
    let body: Vec<u8> = (0..2u32 << 20).map(|i| (i * 7 + i / 251) as u8).collect();
    let file = d.temp_dir().join("blob.bin");
    std::fs::write(&file, &body).unwrap();
    let digest = d.upload_blob(&file);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", d.port())).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    for (path, want) in [(digest.as_str(), 200), ("sha256:nothex", 400)] {
        let head = format!(
            "POST /api/blobs/{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&body).unwrap();
        let (status, text) = read_response(&mut s, false);
        assert_eq!(status, want, "POST {path}: {text}");
        let head = format!("HEAD /api/blobs/{digest} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        s.write_all(head.as_bytes()).unwrap();
        assert_eq!(read_response(&mut s, true).0, 200, "HEAD after POST {path}");
    }
}

/// A client that sends the head and part of a blob, then stops, gets 408 once it has paused
/// `read_timeout`, and nothing of the upload stays in the store.
#[test]
fn a_stalled_blob_upload_is_408_and_leaves_nothing() {
    use std::io::{Read, Write};
    let d = Daemon::builder().env("OLLAMARS_READ_TIMEOUT", "1s").start();
    let digest = format!("sha256:{}", "ab".repeat(32));
    let mut s = std::net::TcpStream::connect(("127.0.0.1", d.port())).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let head =
        format!("POST /api/blobs/{digest} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&[7u8; 4096]).unwrap();
    let t0 = std::time::Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.windows(4).any(|w| w == b"\r\n\r\n") && out.ends_with(b"}") {
            break;
        }
    }
    let resp = String::from_utf8_lossy(&out);
    assert!(resp.starts_with("HTTP/1.1 408"), "{resp:?}\n{}", d.log());
    assert!(resp.contains("stalled"), "{resp:?}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(20));
    // No blob and no temporary file: the store holds what it held before.
    let blobs: Vec<_> = std::fs::read_dir(d.models_dir().join("blobs"))
        .map(|r| r.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(blobs.is_empty(), "{blobs:?}");
    let r = d
        .client()
        .head(d.url(&format!("/api/blobs/{digest}")))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[test]
fn errors_have_ollama_shapes_and_status_codes() {
    let d = tiny_daemon();
    let r = d.post("/api/generate", &json!({"model": "nope", "prompt": "hi"}));
    assert_eq!(r.status(), 404);
    let e = r.json::<Value>().unwrap();
    assert!(e["error"].as_str().unwrap().contains("not found"), "{e}");

    let r = d
        .client()
        .post(d.url("/api/chat"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.json::<Value>().unwrap()["error"].is_string());

    let r = d.post("/api/generate", &json!({"prompt": "hi"}));
    assert_eq!(r.status(), 400);

    let r = d.post(
        "/api/chat",
        &json!({"model": "tiny", "messages": [{"role": "user", "content": "what is this?", "images": ["aGVsbG8="]}]}),
    );
    assert_eq!(r.status(), 400);
    let e = r.json::<Value>().unwrap();
    assert!(e["error"].as_str().unwrap().contains("images"), "{e}");

    let r = d.get("/api/nothing-here");
    assert_eq!(r.status(), 404);
    assert_eq!(r.text().unwrap(), "404 page not found");
    // Ollama's account endpoints (its CLI calls /api/me before a push to ollama.com) say that
    // there are no accounts here, in a message the CLI prints.
    for path in ["/api/me", "/api/signout"] {
        let r = d.post(path, &json!({}));
        assert_eq!(r.status(), 501, "{path}");
        let e = r.json::<Value>().unwrap();
        assert!(e["error"].as_str().unwrap().contains("ollama.com"), "{e}");
    }
}

#[test]
fn prompt_longer_than_num_ctx_is_reported_or_refused() {
    let d = tiny_daemon();
    let long = "the quick brown fox jumps over the lazy dog ".repeat(20);
    let r = d.post(
        "/api/generate",
        &json!({"model": "tiny", "prompt": long, "raw": true, "stream": false,
                "options": {"num_ctx": 64, "num_predict": 2}}),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ollamars-truncated"], "true");
    let original: u64 = r.headers()["x-ollamars-prompt-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let v = r.json::<Value>().unwrap();
    assert_eq!(v["truncated"], true, "{v}");
    assert_eq!(v["prompt_tokens_original"], original);
    assert!(original > 64);
    assert!(
        v["prompt_tokens_dropped"].as_u64().unwrap() >= original - 64,
        "{v}"
    );

    let r = d.post(
        "/api/generate",
        &json!({"model": "tiny", "prompt": long, "raw": true, "truncate": false,
                "options": {"num_ctx": 64, "num_predict": 2}}),
    );
    assert_eq!(r.status(), 400);
    let e = r.json::<Value>().unwrap();
    assert!(e["error"].as_str().unwrap().contains("num_ctx"), "{e}");
}

#[test]
fn chat_longer_than_num_ctx_drops_its_oldest_messages_and_says_so() {
    let d = Daemon::start();
    let template = "{{ range .Messages }}<{{ .Role }}>{{ .Content }}\n{{ end }}<assistant>";
    d.create_model_with("tiny", &models::tiny_llama(), json!({"template": template}));
    let long = "the quick brown fox jumps over the lazy dog ".repeat(20);
    let mut chat = json!({"model": "tiny", "stream": false,
        "messages": [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": long},
                     {"role": "assistant", "content": "ok"},
                     {"role": "user", "content": "hi"}],
        "options": {"num_ctx": 64, "num_predict": 2}});
    let r = d.post("/api/chat", &chat);
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ollamars-truncated"], "true");
    let header = |name: &str| -> u64 { r.headers()[name].to_str().unwrap().parse().unwrap() };
    let (original, dropped, dropped_tokens) = (
        header("x-ollamars-prompt-tokens"),
        header("x-ollamars-dropped-messages"),
        header("x-ollamars-dropped-tokens"),
    );
    let v = r.json::<Value>().unwrap();
    assert_eq!(v["truncated"], true, "{v}");
    // The original is the whole conversation's length, not the length of what was kept.
    assert_eq!(v["prompt_tokens_original"], original, "{v}");
    assert!(original > 64, "{v}");
    assert_eq!(v["messages_dropped"], dropped, "{v}");
    assert!(dropped >= 1, "{v}");
    assert!(v["prompt_eval_count"].as_u64().unwrap() <= 64, "{v}");
    // What was dropped is the difference, the dropped messages' tokens included.
    let sent = v["prompt_eval_count"].as_u64().unwrap();
    assert_eq!(v["prompt_tokens_dropped"], original - sent, "{v}");
    assert_eq!(dropped_tokens, original - sent);

    // The system message stays, the oldest turn goes.
    chat["_debug_render_only"] = json!(true);
    let v = d.post_ok("/api/chat", &chat);
    let rendered = v["_debug_info"]["rendered_template"].as_str().unwrap();
    assert_eq!(
        rendered,
        "<system>You are terse.\n<assistant>ok\n<user>hi\n<assistant>"
    );

    chat["_debug_render_only"] = json!(false);
    chat["truncate"] = json!(false);
    let r = d.post("/api/chat", &chat);
    assert_eq!(r.status(), 400);
}

/// An OpenAI stream's events: served as SSE, ended by `[DONE]`, each before it a JSON object.
fn openai_stream(r: reqwest::blocking::Response) -> Vec<Value> {
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let data = sse_data(r);
    assert_eq!(data.last().unwrap(), "[DONE]", "{data:?}");
    data[..data.len() - 1]
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect()
}

#[test]
fn openai_endpoints_and_sse() {
    let d = tiny_daemon();
    let chat = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                      "max_tokens": 3, "seed": 1});
    let one = d.post_ok("/v1/chat/completions", &chat);
    assert_eq!(one["object"], "chat.completion");
    assert_eq!(one["model"], "tiny");
    assert_eq!(one["choices"][0]["message"]["role"], "assistant");
    assert_eq!(one["choices"][0]["finish_reason"], "length");
    assert_eq!(one["usage"]["completion_tokens"], 3);
    let p = one["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(one["usage"]["total_tokens"].as_u64().unwrap(), p + 3);

    let mut stream = chat.clone();
    stream["stream"] = json!(true);
    stream["stream_options"] = json!({"include_usage": true});
    let r = d.post("/v1/chat/completions", &stream);
    assert_eq!(r.status(), 200);
    let chunks = openai_stream(r);
    let mut text = String::new();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    assert_eq!(text, one["choices"][0]["message"]["content"].as_str().unwrap());
    // include_usage: a last chunk with usage and no choices.
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0, "{usage}");
    assert_eq!(usage["usage"]["completion_tokens"], 3);
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "length"));

    let comp = d.post_ok(
        "/v1/completions",
        &json!({"model": "tiny", "prompt": "once upon", "max_tokens": 2}),
    );
    assert_eq!(comp["object"], "text_completion");
    assert!(comp["choices"][0]["text"].is_string());
    assert_eq!(comp["usage"]["completion_tokens"], 2);

    // Nothing to generate (an empty prompt loads the model; with keep_alive 0 it unloads):
    // still OpenAI's objects, whole or streamed, never Ollama's native reply.
    for keep_alive in [json!("5m"), json!(0)] {
        let body = json!({"model": "tiny", "prompt": "", "keep_alive": keep_alive});
        let comp = d.post_ok("/v1/completions", &body);
        assert_eq!(comp["object"], "text_completion", "{comp}");
        assert_eq!(comp["choices"][0]["text"], "", "{comp}");
        assert_eq!(comp["choices"][0]["finish_reason"], "stop", "{comp}");
        assert_eq!(comp["usage"]["completion_tokens"], 0, "{comp}");
        let mut stream = body.clone();
        stream["stream"] = json!(true);
        let chunks = openai_stream(d.post("/v1/completions", &stream));
        let last = chunks.last().unwrap();
        assert_eq!(last["object"], "text_completion", "{last}");
        assert_eq!(last["choices"][0]["finish_reason"], "stop", "{last}");
    }

    let emb = d.post_ok("/v1/embeddings", &json!({"model": "tiny", "input": ["a", "b"]}));
    assert_eq!(emb["object"], "list");
    assert_eq!(emb["data"].as_array().unwrap().len(), 2);
    assert_eq!(emb["data"][1]["index"], 1);
    assert_eq!(emb["data"][0]["embedding"].as_array().unwrap().len(), 64);

    let models = d.get("/v1/models").json::<Value>().unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "tiny:latest", "{models}");
    let m = d.get("/v1/models/tiny:latest").json::<Value>().unwrap();
    assert_eq!(m["id"], "tiny:latest");
    assert_eq!(m["object"], "model");

    // OpenAI's error shape.
    let r = d.get("/v1/models/missing");
    assert_eq!(r.status(), 404);
    let e = r.json::<Value>().unwrap();
    assert!(
        e["error"]["message"].as_str().unwrap().contains("not found"),
        "{e}"
    );
    assert!(e["error"]["type"].is_string());
    let r = d.post(
        "/v1/chat/completions",
        &json!({"model": "missing", "messages": [{"role": "user", "content": "x"}]}),
    );
    assert_eq!(r.status(), 404);
    assert!(r.json::<Value>().unwrap()["error"]["message"].is_string());
}

#[test]
fn responses_api_whole_and_streamed() {
    let d = tiny_daemon();
    let body = json!({"model": "tiny", "input": "hi", "instructions": "be brief",
                      "max_output_tokens": 3, "options": {"seed": 1}});
    let one = d.post_ok("/v1/responses", &body);
    assert_eq!(one["object"], "response", "{one}");
    assert!(one["id"].as_str().unwrap().starts_with("resp_"), "{one}");
    assert_eq!(one["model"], "tiny", "{one}");
    assert_eq!(one["instructions"], "be brief", "{one}");
    // Cut by max_output_tokens: incomplete, as OpenAI reports it.
    assert_eq!(one["status"], "incomplete", "{one}");
    assert_eq!(one["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(one["usage"]["output_tokens"], 3, "{one}");
    assert!(one["usage"]["input_tokens"].as_u64().unwrap() > 0, "{one}");
    let item = &one["output"][0];
    assert_eq!(item["type"], "message", "{one}");
    assert_eq!(item["role"], "assistant");
    assert_eq!(item["content"][0]["type"], "output_text");
    let whole = item["content"][0]["text"].as_str().unwrap();

    let mut stream = body.clone();
    stream["stream"] = json!(true);
    let r = d.post("/v1/responses", &stream);
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events: Vec<Value> = sse_data(r)
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "response.created", "{events:?}");
    assert_eq!(events[1]["type"], "response.in_progress");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "{e}");
    }
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, whole, "the same seed streams the same text");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.incomplete", "{last}");
    assert_eq!(last["response"]["id"], events[0]["response"]["id"]);
    assert_eq!(last["response"]["output"][0]["content"][0]["text"], whole);
    assert_eq!(last["response"]["usage"]["output_tokens"], 3);

    // Errors have OpenAI's shape; what needs stored responses is refused, not ignored.
    let r = d.post(
        "/v1/responses",
        &json!({"model": "tiny", "input": "x", "previous_response_id": "resp_1"}),
    );
    assert_eq!(r.status(), 400);
    let e = r.json::<Value>().unwrap();
    assert!(
        e["error"]["message"].as_str().unwrap().contains("stores none"),
        "{e}"
    );
    let r = d.post("/v1/responses", &json!({"model": "missing", "input": "x"}));
    assert_eq!(r.status(), 404);
    assert!(r.json::<Value>().unwrap()["error"]["message"].is_string());
}

#[test]
fn anthropic_messages_whole_and_streamed() {
    let d = tiny_daemon();
    let body = json!({"model": "tiny", "max_tokens": 3, "system": "be brief",
                      "messages": [{"role": "user", "content": "hi"}], "options": {"seed": 1}});
    let one = d.post_ok("/v1/messages", &body);
    assert_eq!(one["type"], "message", "{one}");
    assert_eq!(one["role"], "assistant");
    assert_eq!(one["model"], "tiny");
    assert_eq!(one["stop_reason"], "max_tokens", "{one}");
    assert_eq!(one["usage"]["output_tokens"], 3, "{one}");
    assert!(one["usage"]["input_tokens"].as_u64().unwrap() > 0, "{one}");
    let whole: String = one["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap())
        .collect();

    let mut stream = body.clone();
    stream["stream"] = json!(true);
    let r = d.post("/v1/messages", &stream);
    assert_eq!(r.status(), 200);
    let events: Vec<Value> = sse_data(r)
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types[..2], ["message_start", "ping"], "{types:?}");
    assert_eq!(
        types[types.len() - 2..],
        ["message_delta", "message_stop"],
        "{types:?}"
    );
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .map(|e| e["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, whole, "the same seed streams the same text");
    let delta = &events[events.len() - 2];
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens", "{delta}");
    assert_eq!(delta["usage"]["output_tokens"], 3, "{delta}");

    // count_tokens: exactly the prompt the generation read.
    let count = d.post_ok("/v1/messages/count_tokens", &body);
    assert_eq!(
        count,
        json!({"input_tokens": one["usage"]["input_tokens"]}),
        "{one}"
    );

    // Errors have Anthropic's shape.
    let r = d.post(
        "/v1/messages/count_tokens",
        &json!({"model": "missing", "messages": [{"role": "user", "content": "x"}]}),
    );
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().unwrap()["error"]["type"], "not_found_error");
    let r = d.post(
        "/v1/messages",
        &json!({"model": "missing", "max_tokens": 3,
        "messages": [{"role": "user", "content": "x"}]}),
    );
    assert_eq!(r.status(), 404);
    let e = r.json::<Value>().unwrap();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["type"], "not_found_error", "{e}");
    let r = d.post("/v1/messages", &json!({"model": "tiny", "messages": []}));
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().unwrap()["error"]["type"],
        "invalid_request_error"
    );
}
