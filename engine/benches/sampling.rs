//! Per-token cost of the sampler on a 262144-entry logit row (Gemma 3's vocabulary size).
//!
//! `cargo bench -p engine --bench sampling`. Prints microseconds (thread CPU time) per token for
//! several option sets.

use std::hint::black_box;
use std::time::Duration;

use engine::sample::{token_logprobs, Sampler, SamplingOptions};

const N_VOCAB: usize = 262_144;

/// CPU time of this thread: unlike wall time, not inflated when other processes share the cores.
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Logits shaped like a language model's: most tokens far below a handful of likely ones.
fn logits(step: u64) -> Vec<f32> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ step.wrapping_mul(0xD1B5_4A32_D192_ED03);
    (0..N_VOCAB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 40) as f32 / (1u64 << 24) as f32;
            // A long tail around -2 with a sharp head up to ~+18.
            -2.0 + 20.0 * u.powi(24) + 3.0 * (u - 0.5)
        })
        .collect()
}

fn bench(name: &str, opts: SamplingOptions, rows: &[Vec<f32>]) {
    let mut s = Sampler::new(&opts, N_VOCAB, 4096).unwrap();
    for r in rows.iter().take(5) {
        black_box(s.sample(r).unwrap());
    }
    let iters = 400;
    let t = cpu_now();
    for i in 0..iters {
        let tok = s.sample(&rows[i % rows.len()]).unwrap();
        s.accept(tok).unwrap();
    }
    let us = (cpu_now() - t).as_secs_f64() * 1e6 / iters as f64;
    println!("{name:<40} {us:>9.1} us/token");
}

fn main() {
    // Two rows, as a generation loop reads a row the output layer has just written (in cache).
    let rows: Vec<Vec<f32>> = (0..2).map(logits).collect();
    let d = SamplingOptions {
        seed: 1,
        ..SamplingOptions::default()
    };
    bench("defaults (top_k 40, top_p 0.9, T 0.8)", d.clone(), &rows);
    bench(
        "greedy",
        SamplingOptions {
            seed: 1,
            ..SamplingOptions::greedy()
        },
        &rows,
    );
    bench(
        "defaults + repeat_penalty 1.1",
        SamplingOptions {
            repeat_penalty: 1.1,
            ..d.clone()
        },
        &rows,
    );
    bench(
        "top_k 0, top_p 0.9 (whole vocabulary)",
        SamplingOptions {
            top_k: 0,
            ..d.clone()
        },
        &rows,
    );
    bench(
        "top_k 0, min_p 0.05, top_p 1",
        SamplingOptions {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.05,
            ..d.clone()
        },
        &rows,
    );
    bench(
        "mirostat 2",
        SamplingOptions {
            mirostat: 2,
            ..d.clone()
        },
        &rows,
    );

    let iters = 400;
    let mut out = Vec::new();
    let t = cpu_now();
    for i in 0..iters {
        engine::sample::steps::select_top(black_box(&rows[i % rows.len()]), 40, &mut out);
        black_box(&out);
    }
    let us = (cpu_now() - t).as_secs_f64() * 1e6 / iters as f64;
    println!("{:<40} {us:>9.1} us/token", "select_top 40 alone");

    let t = cpu_now();
    for i in 0..iters {
        black_box(token_logprobs(&rows[i % rows.len()], 7, 20).unwrap());
    }
    let us = (cpu_now() - t).as_secs_f64() * 1e6 / iters as f64;
    println!("{:<40} {us:>9.1} us/token", "logprobs with top 20");
}
