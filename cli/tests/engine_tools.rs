//! `ollamars generate` and `ollamars perplexity` run as a user would, on a tiny model of the shared
//! fixtures (random weights: the numbers are checked against llama.cpp in the engine's tests).

use std::path::Path;
use std::process::Command;

fn tiny_model() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/tiny/tiny-llama-spm-e64-f16.gguf")
        .to_string_lossy()
        .into_owned()
}

fn text_file() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/data/text/lighthouses.txt")
        .to_string_lossy()
        .into_owned()
}

fn ollamars(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ollamars"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn perplexity_prints_running_and_final_figures() {
    let (ok, out, err) = ollamars(&[
        "perplexity",
        "-m",
        &tiny_model(),
        "-f",
        &text_file(),
        "-c",
        "128",
        "-t",
        "2",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("[1]") && out.contains("[2]"), "{out}");
    let last = out.lines().last().unwrap();
    assert!(
        last.starts_with("Final estimate: PPL = ") && last.contains(" +/- "),
        "{out}"
    );
}

#[test]
fn perplexity_json() {
    let (ok, out, err) = ollamars(&[
        "perplexity",
        "-m",
        &tiny_model(),
        "-f",
        &text_file(),
        "-c",
        "128",
        "-b",
        "32",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let chunks = v["chunks"].as_u64().unwrap();
    assert!(chunks >= 2);
    assert_eq!(
        v["tokens"].as_u64().unwrap(),
        chunks * (128 / 2 - 1),
        "tokens scored"
    );
    let ppl = v["ppl"].as_f64().unwrap();
    assert!(ppl.is_finite() && ppl > 1.0);
}

#[test]
fn perplexity_needs_two_chunks_of_text() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "Too short.").unwrap();
    let (ok, _, err) = ollamars(&["perplexity", "-m", &tiny_model(), "-f", short.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("needs at least"), "{err}");
}

#[test]
fn generate_streams_text_and_shifts_past_the_context() {
    let (ok, out, err) = ollamars(&[
        "generate",
        "-m",
        &tiny_model(),
        "-p",
        "The quick brown fox",
        "-n",
        "40",
        "-c",
        "24",
        "--temp",
        "0",
    ]);
    assert!(ok, "{err}");
    assert!(!out.trim().is_empty());
    // Greedy is deterministic.
    let (_, again, _) = ollamars(&[
        "generate",
        "-m",
        &tiny_model(),
        "-p",
        "The quick brown fox",
        "-n",
        "40",
        "-c",
        "24",
        "--temp",
        "0",
    ]);
    assert_eq!(out, again);
}

#[test]
fn generate_reports_a_missing_model() {
    let (ok, _, err) = ollamars(&["generate", "-m", "/nonexistent/model.gguf", "-p", "hi"]);
    assert!(!ok);
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
}

#[test]
fn bench_json_reports_both_tests() {
    let (ok, out, err) = ollamars(&[
        "bench",
        "-m",
        &tiny_model(),
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "2",
        "-t",
        "2",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let obj = v.as_object().unwrap();
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["pp_std", "pp_tps", "read_bytes", "tg_std", "tg_tps"]);
    let read = obj["read_bytes"].as_u64().unwrap();
    let file = std::fs::metadata(tiny_model()).unwrap().len();
    assert!(read > 0 && read < file, "read_bytes {read} of a {file}-byte file");
    for k in ["pp_tps", "tg_tps"] {
        let x = obj[k].as_f64().unwrap();
        assert!(x.is_finite() && x > 0.0, "{k} = {x}");
    }
    for k in ["pp_std", "tg_std"] {
        let x = obj[k].as_f64().unwrap();
        assert!(x.is_finite() && x >= 0.0, "{k} = {x}");
    }
}

#[test]
fn bench_at_a_depth_starts_each_test_after_that_many_tokens() {
    let (ok, out, err) = ollamars(&[
        "bench",
        "-m",
        &tiny_model(),
        "-p",
        "8",
        "-n",
        "3",
        "-d",
        "2000",
        "-r",
        "2",
        "-t",
        "2",
    ]);
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l.starts_with("pp8 @ d2000 ")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("tg3 @ d2000 ")), "{out}");
    // The context holds the depth and the longest test: 2008 cells of K and V per layer.
    let kv = |out: &str| -> f64 {
        let s = out.split("KV cache ").nth(1).unwrap();
        s.split(' ').next().unwrap().parse().unwrap()
    };
    let (ok, flat, err) = ollamars(&["bench", "-m", &tiny_model(), "-p", "8", "-n", "3", "-r", "1"]);
    assert!(ok, "{err}");
    assert!(kv(&out) > kv(&flat), "{out}\n{flat}");
    let (ok, _, err) = ollamars(&["bench", "-m", &tiny_model(), "-d", "3000000000"]);
    assert!(
        !ok && err.contains("--n-depth plus the longest test is too many tokens"),
        "{err}"
    );
}

#[test]
fn bench_text_and_skipped_tests() {
    let (ok, out, err) = ollamars(&["bench", "-m", &tiny_model(), "-p", "0", "-n", "3", "-r", "1"]);
    assert!(ok, "{err}");
    assert!(out.contains("first token after"), "{out}");
    assert!(
        out.contains("memory: peak RSS ") && out.contains(" MiB, KV cache "),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("tg3 ") && l.contains(" MiB of weights read per token: ")),
        "{out}"
    );
    assert!(!out.lines().any(|l| l.starts_with("pp")), "{out}");
    let (ok, _, err) = ollamars(&["bench", "-m", &tiny_model(), "-p", "0", "-n", "0"]);
    assert!(!ok && err.contains("nothing to measure"), "{err}");
}

#[test]
fn bench_takes_a_kv_cache_type() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/tiny/tiny-llama-spm-e256-q4_k_m.gguf")
        .to_string_lossy()
        .into_owned();
    let run = |ty: &str| {
        let (ok, out, err) = ollamars(&[
            "bench",
            "-m",
            &model,
            "-p",
            "8",
            "-n",
            "3",
            "-d",
            "8000",
            "-r",
            "1",
            "--cache-type",
            ty,
        ]);
        assert!(ok, "{err}");
        let s = out.split("KV cache ").nth(1).unwrap_or_else(|| panic!("{out}"));
        s.split(' ').next().unwrap().parse::<f64>().unwrap()
    };
    // Q8_0 holds 34 bytes per 32 values against F16's 64.
    let (f16, q8) = (run("f16"), run("q8_0"));
    assert!(
        (q8 / f16 - 34.0 / 64.0).abs() < 0.02,
        "f16 {f16} MiB, q8_0 {q8} MiB"
    );
    let (ok, _, err) = ollamars(&["bench", "-m", &model, "--cache-type", "q4_9"]);
    assert!(!ok && err.contains("unknown cache type 'q4_9'"), "{err}");
    // Heads of 16 values are not whole Q8_0 blocks.
    let (ok, _, err) = ollamars(&["bench", "-m", &tiny_model(), "--cache-type", "q8_0", "-r", "1"]);
    assert!(!ok && !err.is_empty() && !err.contains("panicked"), "{err}");
}
