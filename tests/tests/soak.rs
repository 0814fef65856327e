//! The bounded soak (issue 9, Load): 64 concurrent clients mix generate, chat, embed, tags and
//! show against a tiny model on loopback for `OLLAMARS_SOAK_SECS` (default 300). Passes when
//! every answer is a success or an intended 503 (queue full), and the daemon's RSS is stable:
//! at the end within bounds of its RSS a quarter into the run (when 64 connections and the
//! slots have warmed up). Prints request counts, p50/p99 latency per kind and RSS samples.
//!
//! Not in the default run (minutes long):
//! `cargo test --release -p ollamars-tests --test soak -- --ignored --nocapture`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ollamars_tests::{models, Daemon};
use serde_json::{json, Value};

const CLIENTS: usize = 64;
const KINDS: [&str; 5] = ["generate", "chat", "embed", "tags", "show"];

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    ok: u64,
    busy: u64,
    errors: Vec<String>,
}

#[test]
#[ignore = "minutes long; run explicitly (see the module docs)"]
fn soak_64_clients_mixed_endpoints() {
    let secs: u64 = std::env::var("OLLAMARS_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let d = Daemon::builder()
        .env("OLLAMARS_NUM_PARALLEL", "4")
        .env("OLLAMARS_MAX_QUEUE", "48")
        .env("OLLAMARS_KEEP_ALIVE", "-1")
        .env("OLLAMARS_LOG", "warn")
        .start();
    d.create_model("tiny", &models::tiny_llama());
    // Warm up: load the model once, then take the starting RSS.
    d.post_ok(
        "/api/generate",
        &json!({"model": "tiny", "prompt": "warm", "stream": false, "options": {"num_predict": 4}}),
    );
    let pid = d.pid();
    let rss_start = rss_kib(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let tallies: Arc<Vec<Mutex<Tally>>> =
        Arc::new((0..KINDS.len()).map(|_| Mutex::new(Tally::default())).collect());
    let base = d.url("");
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for c in 0..CLIENTS {
        let (stop, tallies, base) = (stop.clone(), tallies.clone(), base.clone());
        handles.push(std::thread::spawn(move || {
            let client = reqwest::blocking::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap();
            let mut n = c;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let kind = n % KINDS.len();
                n += 1;
                let prompt = format!("client {c} request {n}: tell me something");
                let req = match KINDS[kind] {
                    "generate" => client.post(format!("{base}/api/generate")).json(&json!({
                        "model": "tiny", "prompt": prompt, "stream": n % 2 == 0,
                        "options": {"num_predict": 8, "seed": n}})),
                    "chat" => client.post(format!("{base}/api/chat")).json(&json!({
                        "model": "tiny", "stream": n % 2 == 1,
                        "messages": [{"role": "user", "content": prompt}],
                        "options": {"num_predict": 8}})),
                    "embed" => client
                        .post(format!("{base}/api/embed"))
                        .json(&json!({"model": "tiny", "input": [prompt, "second input"]})),
                    "tags" => client.get(format!("{base}/api/tags")),
                    _ => client
                        .post(format!("{base}/api/show"))
                        .json(&json!({"model": "tiny"})),
                };
                let t = Instant::now();
                let outcome = req.send().and_then(|r| {
                    let status = r.status();
                    r.text().map(|body| (status, body))
                });
                let took = t.elapsed();
                let mut tally = tallies[kind].lock().unwrap();
                match outcome {
                    Ok((s, body)) if s.is_success() => {
                        // A stream can still end in an error line.
                        if body
                            .lines()
                            .any(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v.get("error").is_some()))
                        {
                            tally
                                .errors
                                .push(format!("{}: error in stream: {body:.200}", KINDS[kind]));
                        } else {
                            tally.ok += 1;
                            tally.latencies.push(took);
                        }
                    }
                    Ok((s, _)) if s.as_u16() == 503 => tally.busy += 1,
                    Ok((s, body)) => tally.errors.push(format!("{}: {s}: {body:.200}", KINDS[kind])),
                    Err(e) => tally.errors.push(format!("{}: {e}", KINDS[kind])),
                }
            }
        }));
    }
    // RSS and requests answered so far, every second: a leak grows with requests, allocator
    // high-water levels off.
    let answered = |tallies: &[Mutex<Tally>]| -> u64 {
        tallies
            .iter()
            .map(|t| {
                let t = t.lock().unwrap();
                t.ok + t.busy
            })
            .sum()
    };
    let mut samples = Vec::new();
    let mut counts = Vec::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
        samples.push(rss_kib(pid));
        counts.push(answered(&tallies));
    }
    for i in 1..=10 {
        let j = (samples.len() * i / 10).saturating_sub(1);
        if let (Some(rss), Some(n)) = (samples.get(j), counts.get(j)) {
            println!("soak: at {:>3}%: {rss} KiB after {n} requests", i * 10);
        }
    }
    let (h, e) = (samples.len() / 2, samples.len().saturating_sub(1));
    if e > h && counts[e] > counts[h] {
        println!(
            "soak: second half: {:+} KiB over {} requests ({:+.3} KiB per request)",
            samples[e] as i64 - samples[h] as i64,
            counts[e] - counts[h],
            (samples[e] as f64 - samples[h] as f64) / (counts[e] - counts[h]) as f64
        );
    }
    let rss_quarter = samples.get(samples.len() / 4).copied().unwrap_or(rss_start);
    let rss_peak = samples.iter().copied().max().unwrap_or(rss_start);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let elapsed = t0.elapsed();
    let rss_end = rss_kib(pid);
    println!(
        "soak: {CLIENTS} clients, {:.0}s, RSS after warm-up {rss_start} KiB, at 1/4 {rss_quarter} KiB, \
         end {rss_end} KiB, peak {rss_peak} KiB",
        elapsed.as_secs_f64(),
    );
    let mut all_errors = Vec::new();
    let mut all = Vec::new();
    for (k, t) in KINDS.iter().zip(tallies.iter()) {
        let mut t = t.lock().unwrap();
        t.latencies.sort();
        all.extend(t.latencies.iter().copied());
        println!(
            "soak: {k:>8}: {} ok, {} busy (503), {} errors, p50 {:?}, p99 {:?}",
            t.ok,
            t.busy,
            t.errors.len(),
            percentile(&t.latencies, 0.5),
            percentile(&t.latencies, 0.99)
        );
        all_errors.append(&mut t.errors);
    }
    all.sort();
    println!(
        "soak: all: {} ok ({:.1}/s), p50 {:?}, p99 {:?}",
        all.len(),
        all.len() as f64 / elapsed.as_secs_f64(),
        percentile(&all, 0.5),
        percentile(&all, 0.99)
    );
    assert!(
        all_errors.is_empty(),
        "{} errors, first: {:?}",
        all_errors.len(),
        &all_errors[..all_errors.len().min(5)]
    );
    assert!(!all.is_empty());
    // RSS stable: once the connections and slots are warm, no further growth beyond 25% plus
    // 32 MiB of allocator slack.
    assert!(
        rss_end <= rss_quarter * 5 / 4 + 32 * 1024,
        "RSS grew from {rss_quarter} KiB (1/4 into the run) to {rss_end} KiB"
    );
}
