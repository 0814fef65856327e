//! `GET /metrics` on a live daemon: after real requests the counters, histograms and gauges
//! have moved by what those requests did, per model.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ollamars_tests::daemon::metric_sample;
use ollamars_tests::{models, Daemon};
use serde_json::json;

/// The value of a sample (`name` with its labels, as rendered).
fn sample(text: &str, series: &str) -> f64 {
    metric_sample(text, series).unwrap_or_else(|| panic!("{series} missing:\n{text}"))
}

const TINY: &str = "{model=\"tiny:latest\"}";

fn metric(name: &str) -> String {
    format!("{name}{TINY}")
}

#[test]
fn metrics_count_generations_tokens_loads_and_requests() {
    let d = Daemon::builder().env("OLLAMARS_KEEP_ALIVE", "0").start();
    d.create_model("tiny", &models::tiny_llama());
    let r = d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "hello there", "stream": false,
                "options": {"num_predict": 5, "seed": 1, "temperature": 0}}),
    );
    let generated = r["eval_count"].as_u64().unwrap() as f64;
    let prompt = r["prompt_eval_count"].as_u64().unwrap() as f64;
    let e = d.post_ok(
        "/api/embed",
        &json!({"model": "tiny", "input": "a few words to embed"}),
    );
    let embedded = e["prompt_eval_count"].as_u64().unwrap() as f64;
    let resp = d.get("/metrics");
    assert_eq!(resp.status(), 200);
    let text = resp.text().unwrap();
    assert_eq!(sample(&text, &metric("ollamars_generations_total")), 1.0);
    assert_eq!(sample(&text, &metric("ollamars_eval_tokens_total")), generated);
    assert_eq!(sample(&text, &metric("ollamars_prompt_tokens_total")), prompt);
    assert_eq!(
        sample(&text, &metric("ollamars_embedding_tokens_total")),
        embedded
    );
    assert!(embedded > 0.0);
    assert_eq!(
        sample(&text, &metric("ollamars_time_to_first_token_seconds_count")),
        1.0
    );
    assert!(sample(&text, &metric("ollamars_time_to_first_token_seconds_sum")) > 0.0);
    assert_eq!(
        sample(&text, &metric("ollamars_eval_tokens_per_second_count")),
        1.0
    );
    assert!(sample(&text, &metric("ollamars_model_loads_total")) >= 1.0);
    assert!(
        text.contains("ollamars_requests_total{endpoint=\"/api/generate\",method=\"POST\",status=\"200\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "ollamars_requests_total{endpoint=\"/api/blobs/{digest}\",method=\"POST\",status=\"201\"} 1"
        ),
        "{text}"
    );
    // keep_alive 0: the model unloads once each request is done. The embedding may have loaded
    // it a second time after the generation's unload, so wait for as many unloads as loads.
    let t0 = Instant::now();
    loop {
        let text = d.get("/metrics").text().unwrap();
        let loads = sample(&text, &metric("ollamars_model_loads_total"));
        if sample(&text, &metric("ollamars_model_unloads_total")) >= loads {
            assert_eq!(sample(&text, "ollamars_models_loaded"), 0.0);
            assert!(!text.contains("ollamars_slots_total{"), "{text}");
            break;
        }
        assert!(t0.elapsed().as_secs() < 30, "never unloaded:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The daemon's log written to a file (as under systemd or `serve 2> log`) is plain text: no
/// terminal color codes around levels and fields.
#[test]
fn a_log_to_a_file_has_no_color_codes() {
    let d = Daemon::start();
    d.create_model("tiny", &models::tiny_llama());
    d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "hi", "stream": false, "options": {"num_predict": 2}}),
    );
    // A refused request's line says why, whatever the endpoint's error shape.
    for (path, body) in [
        (
            "/api/generate",
            json!({"model": "tiny", "prompt": "hi", "options": {"top_k": "x"}}),
        ),
        ("/v1/chat/completions", json!({"model": "tiny", "messages": []})),
        (
            "/v1/messages",
            json!({"model": "tiny", "messages": [{"role": "tool", "content": "x"}]}),
        ),
    ] {
        assert_eq!(d.post(path, &body).status(), 400, "{path}");
    }
    let log = d.log();
    assert!(log.contains("model loaded") && log.contains("answered"), "{log}");
    assert!(!log.contains('\x1b'), "escape codes in the log:\n{log:?}");
    for error in [
        r#"error="option \"top_k\" must be"#,
        r#"error="[] is too short - 'messages'""#,
        r#"error="messages[0]: invalid role \"tool\""#,
    ] {
        assert!(log.contains(error), "no {error} in:\n{log}");
    }
}

/// The time to first token is observed from the request's arrival: a body that comes 500 ms
/// after the request's head counts, and the figure is no more than the client saw. The bound
/// checked is 250 ms (the histogram's bucket below it stays empty): the daemon sees the head
/// after the client sent it, later still on a loaded machine, so its measured wait can fall
/// short of the client's sleep; without the wait the figure would be milliseconds.
#[test]
fn time_to_first_token_runs_from_arrival_to_the_first_token_sent() {
    let d = Daemon::start();
    d.create_model("tiny", &models::tiny_llama());
    // Loaded first, so the figure is not a load time.
    d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "", "stream": false}),
    );
    let body =
        json!({"model": "tiny", "prompt": "hello", "options": {"num_predict": 3, "seed": 1}}).to_string();
    let t0 = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", d.port())).unwrap();
    write!(
        s,
        "POST /api/generate HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        d.host(),
        body.len()
    )
    .unwrap();
    s.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    s.write_all(body.as_bytes()).unwrap();
    // The first NDJSON line (chunked): the first token.
    let mut r = BufReader::new(s);
    let mut line = String::new();
    let mut first_token_at = None;
    while r.read_line(&mut line).unwrap() > 0 {
        if line.starts_with("{\"model\"") {
            first_token_at = Some(t0.elapsed());
            break;
        }
        line.clear();
    }
    let seen = first_token_at.expect("no NDJSON line");
    let text = d.get("/metrics").text().unwrap();
    assert_eq!(
        sample(&text, &metric("ollamars_time_to_first_token_seconds_count")),
        1.0,
        "{text}"
    );
    let ttft = sample(&text, &metric("ollamars_time_to_first_token_seconds_sum"));
    assert!(ttft > 0.25, "the wait for the body is not counted: {ttft} s");
    assert!(
        ttft <= seen.as_secs_f64(),
        "{ttft} s measured, the client saw {seen:?}"
    );
    assert_eq!(
        sample(
            &text,
            "ollamars_time_to_first_token_seconds_bucket{model=\"tiny:latest\",le=\"0.25\"}"
        ),
        0.0
    );
}

/// Queue depth and busy slots are per model and follow what the daemon is doing.
#[test]
fn queue_depth_and_busy_slots_per_model() {
    let d = Daemon::builder().env("OLLAMARS_NUM_PARALLEL", "1").start();
    d.create_model("tiny", &models::tiny_llama());
    let long = json!({"model": "tiny", "prompt": "count", "stream": true,
                      "options": {"num_predict": 100000, "temperature": 0}});
    // Holds the only slot until dropped (dropping the stream cancels it; greedy, so whether it
    // meets an end token is fixed, and it does not).
    let first = d.post("/api/generate", &long);
    assert_eq!(first.status(), 200);
    let second = {
        let (client, url) = (d.client().clone(), d.url("/api/generate"));
        let body = json!({"model": "tiny", "prompt": "hi", "stream": false, "options": {"num_predict": 2}});
        std::thread::spawn(move || client.post(url).json(&body).send().map(|r| r.status().as_u16()))
    };
    let t0 = Instant::now();
    loop {
        let text = d.get("/metrics").text().unwrap();
        let queued = metric_sample(&text, &metric("ollamars_queue_depth"));
        if queued == Some(1.0) {
            assert_eq!(sample(&text, &metric("ollamars_slots_busy")), 1.0, "{text}");
            assert_eq!(sample(&text, &metric("ollamars_slots_total")), 1.0, "{text}");
            assert_eq!(sample(&text, "ollamars_models_loaded"), 1.0, "{text}");
            break;
        }
        assert!(
            t0.elapsed().as_secs() < 30,
            "the second request never queued:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(first);
    assert_eq!(second.join().unwrap().unwrap(), 200);
    let t0 = Instant::now();
    loop {
        let text = d.get("/metrics").text().unwrap();
        if metric_sample(&text, &metric("ollamars_slots_busy")) == Some(0.0) {
            assert!(
                metric_sample(&text, &metric("ollamars_queue_depth")).is_none(),
                "{text}"
            );
            // The cancelled generation did not finish.
            assert_eq!(
                sample(&text, &metric("ollamars_generations_total")),
                1.0,
                "{text}"
            );
            break;
        }
        assert!(t0.elapsed().as_secs() < 30, "the slot stayed busy:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
