//! Tokenizer speed on the real models: vocabulary load, and tokenizing/detokenizing a few KB.
//!
//!     cargo bench -p engine --bench tokenizer [-- MODEL.gguf ...]
//!
//! Without arguments it uses `$OLLAMARS_TEST_GEMMA` and `$OLLAMARS_TEST_QWEN`. Figures are the
//! mean CPU time of repeated runs; `scripts/tokenizer-bench.py` measures llama.cpp the same way
//! on the same text.

use std::time::{Duration, Instant};

use engine::gguf::Gguf;
use engine::tokenizer::Vocab;

/// About 4 KB of mixed English prose, code, and a chat template's markers.
fn sample_text() -> String {
    let prose = "The quick brown fox jumps over the lazy dog. Tokenizers split text into pieces \
                 that a language model knows; good ones are fast, exact and boring. ";
    let code =
        "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * 2).collect();\n    println!(\"{v:?}\");\n}\n";
    let chat = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<start_of_turn>model\nFour.<end_of_turn>\n";
    let mut s = String::new();
    while s.len() < 4096 {
        s.push_str(prose);
        s.push_str(code);
        s.push_str(chat);
        s.push_str("Grüße, 日本語, русский — 😀\n");
    }
    s
}

/// CPU time of this thread: on a shared, busy machine wall time mostly measures the others.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        stat.split_whitespace().next()?.parse().ok()?,
    ))
}

/// Mean CPU time of `runs` calls, measured over all of them at once (the kernel's CPU time
/// advances in scheduler ticks, too coarse for one sub-millisecond call); wall time where CPU
/// time is not available.
fn time<T>(runs: u32, mut f: impl FnMut() -> T) -> Duration {
    let (t, c) = (Instant::now(), cpu_time());
    for _ in 0..runs {
        std::hint::black_box(f());
    }
    let total = match (c, cpu_time()) {
        (Some(a), Some(b)) => b - a,
        _ => t.elapsed(),
    };
    total / runs
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let mut paths: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if paths.is_empty() {
        paths = ["OLLAMARS_TEST_GEMMA", "OLLAMARS_TEST_QWEN"]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .collect();
    }
    if paths.is_empty() {
        eprintln!("give model paths, or set OLLAMARS_TEST_GEMMA / OLLAMARS_TEST_QWEN");
        return;
    }
    let text = sample_text();
    for path in paths {
        let open = time(5, || Gguf::open(&path).unwrap());
        let gguf = Gguf::open(&path).unwrap();
        let load = time(10, || Vocab::from_metadata(gguf.metadata()).unwrap());
        let vocab = Vocab::from_metadata(gguf.metadata()).unwrap();
        let raw = time(500, || vocab.tokenize(&text, true, false));
        let special = time(500, || vocab.tokenize(&text, true, true));
        let ids = vocab.tokenize(&text, true, true);
        let detok = time(2000, || vocab.detokenize(&ids, false, true));
        println!("{path}");
        println!("  n_tokens {} ({:?})", vocab.n_tokens(), vocab.kind());
        println!("  Gguf::open            {:8.2} ms", ms(open));
        println!("  Vocab::from_metadata  {:8.2} ms", ms(load));
        println!(
            "  tokenize {} bytes -> {} tokens: {:.3} ms (parse_special: {:.3} ms)",
            text.len(),
            ids.len(),
            ms(raw),
            ms(special)
        );
        println!("  detokenize {} tokens: {:.4} ms", ids.len(), ms(detok));
    }
}
