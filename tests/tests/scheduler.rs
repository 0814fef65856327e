//! The scheduler through a live daemon: keep-alive, unload, eviction, context reloads, the
//! queue bound, parallel slots and cancellation on disconnect.

use std::io::{BufRead, BufReader};
use std::thread;
use std::time::{Duration, Instant};

use ollamars_tests::daemon::{metric_sample, ndjson, wait_for};
use ollamars_tests::{models, Daemon};
use serde_json::{json, Value};

fn ps(d: &Daemon) -> Vec<Value> {
    d.get("/api/ps").json::<Value>().unwrap()["models"]
        .as_array()
        .unwrap()
        .clone()
}

fn ps_names(d: &Daemon) -> Vec<String> {
    ps(d)
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

/// A series of `/metrics` (0 when absent, as gauges of nothing are left out).
fn metric(d: &Daemon, series: &str) -> f64 {
    let text = d.get("/metrics").text().unwrap();
    metric_sample(&text, series).unwrap_or(0.0)
}

/// Requests the daemon counts as waiting for model `tiny` or a slot.
fn queue_depth(d: &Daemon) -> f64 {
    metric(d, "ollamars_queue_depth{model=\"tiny:latest\"}")
}

fn generate(d: &Daemon, model: &str, extra: Value) -> Value {
    let mut body = json!({"model": model, "prompt": "hi", "stream": false,
                          "options": {"num_predict": 1}});
    if let (Some(o), Value::Object(more)) = (body.as_object_mut(), extra) {
        o.extend(more);
    }
    d.post_ok("/api/generate", &body)
}

#[test]
fn keep_alive_from_the_request_and_the_default_expire() {
    let d = Daemon::builder().env("OLLAMARS_KEEP_ALIVE", "2s").start();
    d.create_model("a", &models::tiny_llama());
    d.create_model("b", &models::tiny("tiny-llama-spm-e64-q4_0.gguf"));
    // The default keep-alive (2s) applies to `a`; `b` asks for forever.
    generate(&d, "a", json!({}));
    generate(&d, "b", json!({"keep_alive": -1}));
    assert_eq!(ps(&d).len(), 2);
    wait_for(20, "a to expire", || ps_names(&d) == ["b:latest"]);
    // A duration string in the request; `b` is still there well after 2s.
    generate(&d, "a", json!({"keep_alive": "1s"}));
    wait_for(20, "a to expire again", || ps_names(&d) == ["b:latest"]);
    // A number is seconds.
    generate(&d, "a", json!({"keep_alive": 600}));
    let a = ps(&d).into_iter().find(|m| m["name"] == "a:latest").unwrap();
    assert!(a["expires_at"].as_str().unwrap().contains('T'), "{a}");
    // keep_alive 0 on a generation unloads right after it.
    generate(&d, "a", json!({"keep_alive": 0}));
    wait_for(20, "a to unload", || ps_names(&d) == ["b:latest"]);
}

#[test]
fn one_loaded_model_at_a_time_evicts_the_idle_one() {
    let d = Daemon::builder().env("OLLAMARS_MAX_LOADED_MODELS", "1").start();
    d.create_model("a", &models::tiny_llama());
    d.create_model("b", &models::tiny("tiny-llama-spm-e64-q4_0.gguf"));
    generate(&d, "a", json!({}));
    assert_eq!(ps_names(&d), ["a:latest"]);
    generate(&d, "b", json!({}));
    assert_eq!(ps_names(&d), ["b:latest"]);
    generate(&d, "a", json!({}));
    assert_eq!(ps_names(&d), ["a:latest"]);
    assert!(d.log().contains("unloading to make room"), "{}", d.log());

    // A request `b`'s template cannot serve (tools, thinking, a suffix) is refused before
    // anything is queued: `a` stays loaded, `b` is not loaded.
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    for (path, body, error) in [
        (
            "/api/chat",
            json!({"model": "b", "messages": [{"role": "user", "content": "x"}], "tools": tools}),
            "does not support tools",
        ),
        (
            "/api/chat",
            json!({"model": "b", "messages": [{"role": "user", "content": "x"}], "think": true}),
            "does not support thinking",
        ),
        (
            "/api/generate",
            json!({"model": "b", "prompt": "x", "suffix": "y"}),
            "does not support insert",
        ),
        // A raw prompt has no template, but the model is still asked (as Ollama asks it).
        (
            "/api/generate",
            json!({"model": "b", "prompt": "x", "suffix": "y", "raw": true}),
            "does not support insert",
        ),
        (
            "/api/generate",
            json!({"model": "b", "prompt": "x", "raw": true, "think": true}),
            "does not support thinking",
        ),
    ] {
        let r = d.post(path, &body);
        assert_eq!(r.status(), 400, "{body}");
        let e = r.json::<Value>().unwrap();
        assert!(e["error"].as_str().unwrap().contains(error), "{e}");
        assert_eq!(ps_names(&d), ["a:latest"], "{body}");
    }
}

#[test]
fn a_larger_context_reloads_a_smaller_one_does_not() {
    let d = Daemon::start();
    d.create_model("tiny", &models::tiny_llama());
    let ctx = |d: &Daemon| ps(d)[0]["context_length"].as_u64().unwrap();
    let load = |d: &Daemon, n: u32| generate(d, "tiny", json!({"options": {"num_ctx": n, "num_predict": 1}}));
    load(&d, 256);
    assert_eq!(ctx(&d), 256);
    load(&d, 128);
    assert_eq!(ctx(&d), 256, "a smaller num_ctx reloaded the model");
    // The model loaded with 256 serves a request for 128 as a context of 128: the reply does
    // not depend on what was loaded before. A prompt of more is refused without truncation,
    // cut to fit with it, and the generation ends at the smaller context.
    let long = "word ".repeat(200);
    let body = json!({"model": "tiny", "prompt": long, "stream": false, "truncate": false,
        "options": {"num_ctx": 128, "num_predict": 1}});
    let r = d.post("/api/generate", &body);
    assert_eq!(r.status(), 400);
    let e = r.json::<Value>().unwrap();
    assert!(
        e["error"].as_str().unwrap().contains("context length of 128"),
        "{e}"
    );
    let r = generate(
        &d,
        "tiny",
        json!({"prompt": long, "options": {"num_ctx": 128, "num_predict": 1}}),
    );
    assert!(r["prompt_eval_count"].as_u64().unwrap() <= 128, "{r}");
    let r = generate(
        &d,
        "tiny",
        json!({"shift": false, "options": {"num_ctx": 128, "num_predict": 1000}}),
    );
    let used = r["prompt_eval_count"].as_u64().unwrap() + r["eval_count"].as_u64().unwrap();
    assert!(
        // The last token is sampled, not evaluated: it takes no place in the context.
        (120..=129).contains(&used),
        "{used} tokens in a context of 128: {r}"
    );
    assert_eq!(r["done_reason"], "length", "{r}");
    assert_eq!(ctx(&d), 256);
    load(&d, 512);
    assert_eq!(ctx(&d), 512, "a larger num_ctx did not reload the model");
    assert_eq!(ps(&d).len(), 1);
}

/// A streaming generation that runs until its client goes away (tiny model, huge num_predict).
/// Greedy: sampled, the tiny model's noise reaches its end-of-text token now and then (once
/// after 54020 tokens, about 9 s), which ended the stream in the middle of a test; greedily it
/// ran 100000 tokens without.
fn endless(d: &Daemon, model: &str) -> BufReader<reqwest::blocking::Response> {
    let r = d.post(
        "/api/generate",
        &json!({"model": model, "prompt": "count",
                "options": {"num_predict": 10_000_000, "temperature": 0}}),
    );
    assert_eq!(r.status(), 200);
    let mut reader = BufReader::new(r);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains("\"done\":false"), "{line}");
    reader
}

#[test]
fn a_full_queue_answers_503_and_a_disconnect_frees_the_slot() {
    let d = Daemon::builder()
        .env("OLLAMARS_NUM_PARALLEL", "1")
        .env("OLLAMARS_MAX_QUEUE", "1")
        .start();
    d.create_model("tiny", &models::tiny_llama());
    let running = endless(&d, "tiny");
    // The second request waits for the only slot; it is the whole queue.
    let (url, client) = (d.url("/api/generate"), d.client().clone());
    let waiting = thread::spawn(move || {
        let t0 = Instant::now();
        let r = client
            .post(url)
            .json(&json!({"model": "tiny", "prompt": "hi", "stream": false,
                          "options": {"num_predict": 2}}))
            .send()
            .unwrap();
        (r.status(), r.json::<Value>().unwrap(), t0.elapsed())
    });
    // Only once the daemon counts it as queued: a fixed pause was sometimes too short on a
    // busy CI machine, and then the third request took the queue's place instead.
    wait_for(20, "the second request to queue", || queue_depth(&d) == 1.0);
    let r = d.post("/api/generate", &json!({"model": "tiny", "prompt": "hi"}));
    assert_eq!(r.status(), 503);
    let e = r.json::<Value>().unwrap();
    assert!(e["error"].as_str().unwrap().contains("busy"), "{e}");
    assert!(!waiting.is_finished(), "the queued request did not wait");
    // The client of the endless generation goes away: its slot goes to the waiting request.
    drop(running);
    let (status, reply, waited) = waiting.join().unwrap();
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["eval_count"], 2, "{reply}");
    eprintln!("queued request served {waited:?} after it was sent");
}

/// A daemon with room for one model and two of them, `a` busy with an endless stream.
fn one_model_busy() -> (Daemon, BufReader<reqwest::blocking::Response>) {
    let d = Daemon::builder().env("OLLAMARS_MAX_LOADED_MODELS", "1").start();
    d.create_model("a", &models::tiny_llama());
    d.create_model("b", &models::tiny("tiny-llama-spm-e64-q4_0.gguf"));
    let running = endless(&d, "a");
    (d, running)
}

/// Waits until a request for `b` has stopped the busy `a` from taking new requests.
fn wait_for_a_to_drain(d: &Daemon) {
    wait_for(60, "b to wait for a to drain", || {
        d.log().contains("unloading to make room once its requests end")
    });
}

/// With one model at a time, a request for `b` waits for the busy `a`; requests for `a` that
/// come after it wait too, so `a` drains and `b` is served: a steady stream of requests for a
/// loaded model must not starve one for another model.
#[test]
fn a_request_for_another_model_is_not_starved_by_later_ones() {
    let (d, running) = one_model_busy();
    let request = |model: &'static str| {
        let (url, client) = (d.url("/api/generate"), d.client().clone());
        thread::spawn(move || {
            let r = client
                .post(url)
                .json(&json!({"model": model, "prompt": "hi", "stream": false,
                              "options": {"num_predict": 1}}))
                .send()
                .unwrap();
            assert_eq!(r.status(), 200);
            Instant::now()
        })
    };
    let b = request("b");
    wait_for_a_to_drain(&d);
    let a_later = request("a");
    // Before, the later request joined the busy `a` at once. Leave it a while to do that.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !a_later.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    drop(running);
    let (b_done, a_done) = (b.join().unwrap(), a_later.join().unwrap());
    assert!(
        b_done < a_done,
        "the later request for a was served before the one for b"
    );
}

/// When the request for `b` goes away (its client left) before the busy `a` drains, `a` takes
/// requests again and stays loaded: it is not unloaded for a load nobody waits for.
#[test]
fn a_model_drained_for_a_request_that_left_stays_loaded() {
    let (d, running) = one_model_busy();
    let (url, client) = (d.url("/api/generate"), d.client().clone());
    let b = thread::spawn(move || {
        client
            .post(url)
            .timeout(Duration::from_secs(3))
            .json(&json!({"model": "b", "prompt": "hi", "stream": false}))
            .send()
    });
    wait_for_a_to_drain(&d);
    if let Ok(r) = b.join().unwrap() {
        panic!(
            "b was answered while a was busy: {} {}\n{}",
            r.status(),
            r.text().unwrap_or_default(),
            d.log()
        );
    }
    wait_for(60, "b's request to leave the queue", || {
        metric(&d, "ollamars_queue_depth{model=\"b:latest\"}") == 0.0
    });
    drop(running);
    wait_for(60, "a's stream to end", || {
        metric(&d, "ollamars_slots_busy{model=\"a:latest\"}") == 0.0
    });
    generate(&d, "a", json!({}));
    assert_eq!(
        metric(&d, "ollamars_model_loads_total{model=\"a:latest\"}"),
        1.0,
        "a was unloaded and loaded again:\n{}",
        d.log()
    );
    assert_eq!(ps_names(&d), ["a:latest"]);
}

/// `keep_alive: 0` with an empty prompt on a busy model (`ollamars stop`) unloads it once its
/// requests end; requests that come meanwhile are served by it at once, as Ollama's do, and one
/// with its own keep-alive keeps it loaded. (They used to wait for the busy one and reload it.)
#[test]
fn an_unload_of_a_busy_model_lets_later_requests_join() {
    let d = Daemon::builder().env("OLLAMARS_NUM_PARALLEL", "2").start();
    d.create_model("a", &models::tiny_llama());
    let loads = |d: &Daemon| metric(d, "ollamars_model_loads_total{model=\"a:latest\"}");
    let join_while_busy = |keep_alive: Value| {
        let running = endless(&d, "a");
        let r = d.post_ok("/api/generate", &json!({"model": "a", "keep_alive": 0}));
        assert_eq!(r["done_reason"], "unload", "{r}");
        let mut body = json!({"model": "a", "prompt": "hi", "stream": false,
                              "options": {"num_predict": 1}});
        if !keep_alive.is_null() {
            body["keep_alive"] = keep_alive;
        }
        let r = d
            .client()
            .post(d.url("/api/generate"))
            .timeout(Duration::from_secs(30))
            .json(&body)
            .send();
        assert!(
            matches!(&r, Ok(r) if r.status() == 200),
            "a request after the unload waited for the busy model: {r:?}\n{}",
            d.log()
        );
        drop(running);
        wait_for(60, "a's stream to end", || {
            metric(&d, "ollamars_slots_busy{model=\"a:latest\"}") == 0.0
        });
    };
    join_while_busy(Value::Null);
    assert_eq!(loads(&d), 1.0, "a was reloaded:\n{}", d.log());
    wait_for(20, "a to unload once idle", || ps(&d).is_empty());

    join_while_busy(json!("10m"));
    assert_eq!(loads(&d), 2.0, "{}", d.log());
    thread::sleep(Duration::from_millis(500));
    assert_eq!(ps_names(&d), ["a:latest"], "{}", d.log());
}

/// The queue bound counts requests that wait, not ones served at once: with four slots free and
/// room for one waiting request, bursts of four requests are all served. (Counting a request
/// from its arrival to its slot refused about one in four of these.)
#[test]
fn requests_served_at_once_do_not_count_against_the_queue() {
    let d = Daemon::builder()
        .env("OLLAMARS_NUM_PARALLEL", "4")
        .env("OLLAMARS_MAX_QUEUE", "1")
        .start();
    d.create_model("tiny", &models::tiny_llama());
    // A long prompt: rendering and tokenizing it is the time two requests overlapped in.
    let body = json!({"model": "tiny", "prompt": "word ".repeat(3000), "stream": false,
                      "options": {"num_predict": 1}});
    assert_eq!(d.post("/api/generate", &body).status(), 200);
    for round in 0..8 {
        let burst: Vec<_> = (0..4)
            .map(|_| {
                let (url, client, body) = (d.url("/api/generate"), d.client().clone(), body.clone());
                thread::spawn(move || client.post(url).json(&body).send().unwrap().status())
            })
            .collect();
        for t in burst {
            assert_eq!(t.join().unwrap(), 200, "round {round}");
        }
    }
}

#[test]
fn disconnect_during_a_long_prefill_frees_the_slot_promptly() {
    let d = Daemon::builder().env("OLLAMARS_NUM_PARALLEL", "1").start();
    d.create_model("gemma", &models::gemma());
    let prompt = |word: &str| {
        format!(
            "{word} {}",
            "the quick brown fox jumps over the lazy dog. ".repeat(300)
        )
    };
    // How long the whole prefill takes (about 2000 tokens, four of the runner's 512-token steps).
    let full = generate(
        &d,
        "gemma",
        json!({"prompt": prompt("First"), "raw": true,
               "options": {"num_ctx": 4096, "num_predict": 1}}),
    );
    let prefill = Duration::from_nanos(full["prompt_eval_duration"].as_u64().unwrap());
    assert!(full["prompt_eval_count"].as_u64().unwrap() > 1500, "{full}");
    // A different prompt (no cached prefix), abandoned by its client after 300 ms: the reply
    // headers only come with the first token, so the client leaves during the prefill.
    let t0 = Instant::now();
    let r = d
        .client()
        .post(d.url("/api/generate"))
        .timeout(Duration::from_millis(300))
        .json(&json!({"model": "gemma", "prompt": prompt("Second"), "raw": true,
                      "options": {"num_ctx": 4096, "num_predict": 1}}))
        .send();
    assert!(r.is_err(), "the prefill finished within 300 ms");
    let next = generate(
        &d,
        "gemma",
        json!({"prompt": "Hello", "options": {"num_ctx": 4096, "num_predict": 1}}),
    );
    let after = t0.elapsed();
    assert_eq!(next["done"], true);
    eprintln!("full prefill {prefill:?}; abandoned request + next request {after:?}");
    assert!(
        after < prefill * 2 / 3,
        "the abandoned prefill held the slot: the next request took {after:?}, a full prefill {prefill:?}"
    );
}

/// A logprobs item: the token's bytes, its logprob, and the top alternatives as the same pairs.
type LogprobItem = (Value, f64, Vec<(Value, f64)>);

/// The logprobs items of a streamed reply.
fn logprob_items(lines: &[Value]) -> Vec<LogprobItem> {
    let pair = |v: &Value| (v["bytes"].clone(), v["logprob"].as_f64().unwrap());
    lines
        .iter()
        .filter_map(|l| l["logprobs"].as_array())
        .flatten()
        .map(|i| {
            let (bytes, lp) = pair(i);
            let top = i["top_logprobs"].as_array().unwrap().iter().map(pair).collect();
            (bytes, lp, top)
        })
        .collect()
}

/// Slots decoding side by side give each request the reply it gets alone, to the bit, greedy or
/// sampled with a seed: the same tokens with the same logprobs and alternatives (ARCHITECTURE.md, invariants: logits do not
/// depend on the batch a token is in nor on the KV cells its sequence got; every matrix of the
/// Gemma file is packed on x86). Interleaved requests get cells in other blocks of the cache than
/// alone, which moved logprobs by up to 0.15 when attention's softmax sums depended on them; a
/// slot reading another slot's cells or activations changes the first tokens.
#[test]
fn four_parallel_streams_match_serial_replies() {
    let d = Daemon::builder().env("OLLAMARS_NUM_PARALLEL", "4").start();
    d.create_model("gemma", &models::gemma());
    let prompts = [
        "Write a haiku about the sea.",
        "Name three primary colors.",
        "What is the capital of Italy?",
        "Count from one to five.",
    ];
    // Two greedy requests and two sampled with a seed, which must draw the same tokens.
    let body = |i: usize| {
        let (temperature, seed) = if i.is_multiple_of(2) {
            (0.0, 0)
        } else {
            (0.9, 7 + i)
        };
        json!({"model": "gemma", "prompt": prompts[i], "stream": true,
               "logprobs": true, "top_logprobs": 5,
               "options": {"num_predict": 24, "temperature": temperature, "seed": seed,
                           "num_ctx": 1024}})
    };
    let text = |lines: &[Value]| -> String { lines.iter().filter_map(|l| l["response"].as_str()).collect() };
    generate(
        &d,
        "gemma",
        json!({"options": {"num_ctx": 1024, "num_predict": 1}}),
    );

    let t0 = Instant::now();
    let serial: Vec<Vec<Value>> = (0..prompts.len())
        .map(|i| ndjson(d.post("/api/generate", &body(i))))
        .collect();
    let serial_time = t0.elapsed();

    let t0 = Instant::now();
    let handles: Vec<_> = (0..prompts.len())
        .map(|i| {
            let (url, client, b) = (d.url("/api/generate"), d.client().clone(), body(i));
            thread::spawn(move || ndjson(client.post(url).json(&b).send().unwrap()))
        })
        .collect();
    let parallel: Vec<Vec<Value>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let parallel_time = t0.elapsed();
    eprintln!(
        "4 requests x 24 tokens on gemma3-270m: serial {serial_time:?}, 4 parallel slots {parallel_time:?}"
    );
    for (i, (lines, alone)) in parallel.iter().zip(&serial).enumerate() {
        let last = lines.last().unwrap();
        assert_eq!(last["done"], true, "{last}");
        let (got, want) = (logprob_items(lines), logprob_items(alone));
        assert!(!want.is_empty(), "prompt {i}: no logprobs");
        let what = format!("prompt {i}: batched {:?}, alone {:?}", text(lines), text(alone));
        assert_eq!(got.len(), want.len(), "{what}");
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{what}: token {j}");
        }
    }
}
