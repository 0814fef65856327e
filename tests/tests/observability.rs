//! `GET /metrics` on a live daemon: after a generation and an embedding, the counters and
//! histograms have moved by what those requests did.

use ollamars_tests::{models, Daemon};
use serde_json::json;

/// The value of an unlabelled sample.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
        .parse()
        .unwrap()
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
    let resp = d.get("/metrics");
    assert_eq!(resp.status(), 200);
    let text = resp.text().unwrap();
    assert_eq!(sample(&text, "ollamars_generations_total"), 1.0);
    assert_eq!(sample(&text, "ollamars_eval_tokens_total"), generated);
    assert_eq!(sample(&text, "ollamars_prompt_tokens_total"), prompt);
    assert_eq!(sample(&text, "ollamars_time_to_first_token_seconds_count"), 1.0);
    assert!(sample(&text, "ollamars_time_to_first_token_seconds_sum") > 0.0);
    assert_eq!(sample(&text, "ollamars_eval_tokens_per_second_count"), 1.0);
    assert!(sample(&text, "ollamars_model_loads_total") >= 1.0);
    assert_eq!(sample(&text, "ollamars_queue_depth"), 0.0);
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
    // keep_alive 0: the model unloads once the request is done.
    let t0 = std::time::Instant::now();
    loop {
        let text = d.get("/metrics").text().unwrap();
        if sample(&text, "ollamars_model_unloads_total") >= 1.0 {
            assert_eq!(sample(&text, "ollamars_models_loaded"), 0.0);
            break;
        }
        assert!(t0.elapsed().as_secs() < 30, "never unloaded:\n{text}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
