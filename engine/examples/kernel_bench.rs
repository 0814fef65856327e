//! Kernel micro-benchmarks: `cargo run --release -p engine --example kernel_bench -- [threads]`.
//! GEMV bandwidth on model-sized matrices and GEMM throughput for prompt batches.

use std::time::Instant;

use engine::kernels::matmul::{matmul, Matrix};
use engine::kernels::{quantize_act, vec_dot_type, Isa};
use engine::quant::{self, GgmlType};
use engine::threads::ThreadPool;

/// Packs the matrix when PACKED is set and the tier has packed kernels; returns the packed rows.
fn maybe_pack(isa: Isa, ty: GgmlType, n: usize, rows: usize, data: &mut [u8]) -> usize {
    if std::env::var("PACKED").is_ok() && engine::kernels::matmul::can_use_packed(isa, ty) {
        engine::kernels::packed::pack_in_place(ty, n, data, rows, &mut Vec::new())
    } else {
        0
    }
}

fn random_matrix(ty: GgmlType, n: usize, rows: usize) -> Vec<u8> {
    // Quantize random f32 rows so scales are realistic.
    let mut seed = 1u64;
    let mut f = vec![0f32; n];
    let rb = ty.row_bytes(n as u64).unwrap() as usize;
    let mut out = vec![0u8; rb * rows];
    let proto_rows = 64.min(rows);
    for r in 0..proto_rows {
        for v in f.iter_mut() {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *v = ((seed >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 0.04;
        }
        quant::quantize_row(ty, &f, &mut out[r * rb..(r + 1) * rb]).unwrap();
    }
    for r in proto_rows..rows {
        out.copy_within((r % proto_rows) * rb..(r % proto_rows + 1) * rb, r * rb);
    }
    out
}

/// CPU time of this thread (ns), from /proc: on a loaded machine wall time says little.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn bench(name: &str, f: &mut dyn FnMut(), reps: usize) -> f64 {
    f();
    if std::env::var("CPU_TIME").is_ok() {
        // The scheduler accounts CPU time in ticks (4 ms here): time all repetitions at once.
        let c = thread_cpu_ns();
        for _ in 0..reps {
            f();
        }
        return (thread_cpu_ns() - c) as f64 * 1e-9 / reps as f64;
    }
    let mut times = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let med = times[times.len() / 2];
    let _ = name;
    med
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let which = args.get(2).cloned().unwrap_or_default();
    let pool = ThreadPool::new(threads).unwrap();
    let isa = Isa::active();
    println!("isa {isa}, {threads} threads");
    let gemv_cases: &[(&str, GgmlType, usize, usize)] = &[
        ("gemma lm head", GgmlType::Q8_0, 640, 262144),
        ("qwen lm head", GgmlType::Q8_0, 896, 151936),
        ("q5_0 2048x640", GgmlType::Q5_0, 640, 2048 * 16),
        ("q4_0 2048x5632", GgmlType::Q4_0, 2048, 5632 * 8),
        ("q4_k 2048x5632", GgmlType::Q4_K, 2048, 5632 * 8),
        ("q6_k 5632x2048", GgmlType::Q6_K, 5632, 2048 * 8),
        ("q8_0 2048x5632", GgmlType::Q8_0, 2048, 5632 * 8),
    ];
    if which == "bw" {
        let bytes = 1usize << 30;
        let buf: Vec<u64> = (0..bytes / 8).map(|i| i as u64).collect();
        for streams in [1usize, 2, 4] {
            let t = bench(
                "bw",
                &mut || {
                    let sums: Vec<std::sync::atomic::AtomicU64> = (0..threads).map(|_| 0.into()).collect();
                    pool.run(|w| {
                        let share = w.share(buf.len(), 4096);
                        let part = &buf[share];
                        let per = part.len() / streams;
                        let mut acc = [0u64; 8];
                        let mut i = 0;
                        while i + 8 <= per {
                            for s in 0..streams {
                                let b = &part[s * per + i..s * per + i + 8];
                                for k in 0..8 {
                                    acc[k] ^= b[k];
                                }
                            }
                            i += 8;
                        }
                        sums[w.index].store(
                            acc.iter().fold(0, |a, b| a ^ b),
                            std::sync::atomic::Ordering::Relaxed,
                        );
                    });
                    std::hint::black_box(&sums);
                },
                7,
            );
            println!(
                "read bandwidth, {streams} streams/thread: {:6.1} GB/s",
                bytes as f64 / t / 1e9
            );
        }
    }
    if which == "l2" {
        // Compute throughput: a 1 MB matrix stays in L2, so memory is out of the picture.
        for &(name, ty, n, _) in gemv_cases {
            let rb = ty.row_bytes(n as u64).unwrap() as usize;
            let rows = (1 << 20) / rb / 16 * 16;
            let mut data = random_matrix(ty, n, rows);
            let packed_rows = maybe_pack(isa, ty, n, rows, &mut data);
            let m = Matrix {
                ty,
                n,
                n_out: rows,
                row_bytes: rb,
                data: &data,
                packed_rows,
            };
            let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let at = vec_dot_type(ty);
            let mut xq = vec![0u8; at.row_bytes(n as u64).unwrap() as usize];
            quantize_act(isa, at, &x, &mut xq);
            let mut out = vec![0f32; rows];
            let t = bench(
                name,
                &mut || {
                    for _ in 0..2000 {
                        matmul(&pool, isa, &m, &xq, 1, &mut out)
                    }
                },
                5,
            ) / 2000.0;
            println!(
                "l2 gemv {name:16} {:7.2} MB  {:8.1} us  {:6.1} GB/s",
                data.len() as f64 / 1e6,
                t * 1e6,
                data.len() as f64 / t / 1e9
            );
        }
    }
    if which.is_empty() || which == "gemv" {
        for &(name, ty, n, rows) in gemv_cases {
            let mut data = random_matrix(ty, n, rows);
            let packed_rows = maybe_pack(isa, ty, n, rows, &mut data);
            let rb = ty.row_bytes(n as u64).unwrap() as usize;
            let m = Matrix {
                ty,
                n,
                n_out: rows,
                row_bytes: rb,
                data: &data,
                packed_rows,
            };
            let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let at = vec_dot_type(ty);
            let mut xq = vec![0u8; at.row_bytes(n as u64).unwrap() as usize];
            quantize_act(isa, at, &x, &mut xq);
            let mut out = vec![0f32; rows];
            let t = bench(name, &mut || matmul(&pool, isa, &m, &xq, 1, &mut out), 15);
            println!(
                "gemv {name:16} {:7.1} MB  {:8.3} ms  {:6.1} GB/s",
                data.len() as f64 / 1e6,
                t * 1e3,
                data.len() as f64 / t / 1e9
            );
        }
    }
    if which.is_empty() || which == "gemm" {
        let cases: &[(GgmlType, usize, usize)] = &[
            (GgmlType::Q4_0, 2048, 2048),
            (GgmlType::Q8_0, 2048, 2048),
            (GgmlType::Q5_0, 640, 2048),
            (GgmlType::Q4_K, 2048, 2048),
            (GgmlType::Q6_K, 2048, 2048),
            (GgmlType::Q6_K, 5632, 2048),
            (GgmlType::Q4_K, 5632, 2048),
        ];
        let tokens = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(512usize);
        for &(ty, n, rows) in cases {
            let mut data = random_matrix(ty, n, rows);
            let packed_rows = maybe_pack(isa, ty, n, rows, &mut data);
            let rb = ty.row_bytes(n as u64).unwrap() as usize;
            let m = Matrix {
                ty,
                n,
                n_out: rows,
                row_bytes: rb,
                data: &data,
                packed_rows,
            };
            let at = vec_dot_type(ty);
            let arb = at.row_bytes(n as u64).unwrap() as usize;
            let x: Vec<f32> = (0..n * tokens).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut xq = vec![0u8; arb * tokens];
            for t in 0..tokens {
                quantize_act(isa, at, &x[t * n..(t + 1) * n], &mut xq[t * arb..(t + 1) * arb]);
            }
            let mut out = vec![0f32; rows * tokens];
            let t = bench("gemm", &mut || matmul(&pool, isa, &m, &xq, tokens, &mut out), 40);
            let macs = (n * rows * tokens) as f64;
            println!(
                "gemm {ty:5} {n}x{rows} x {tokens} tokens: {:8.2} ms  {:6.1} GMAC/s",
                t * 1e3,
                macs / t / 1e9
            );
        }
    }
}
