//! Kernel micro-benchmarks: `cargo run --release -p engine --example kernel_bench -- [threads]
//! [gemv|gemm|l2|bw|stream|peak] [tokens] [type]`.
//! GEMV bandwidth on model-sized matrices and GEMM throughput for prompt batches.
//!
//! `kernel_bench 2 peak` is the ceiling for the prompt kernels: independent chains of AVX-512
//! `vpdpbusd` (64 int8 multiply-adds each) and nothing else, per thread with all threads busy.
//! No kernel can beat it; `gemm` shows how close each type's GEMM gets. Its second line is the
//! ceiling of the 16-value sub-block types (Q6_K, Q3_K, Q2_K): their batch step's instructions
//! alone, with no memory operand (see [`sub16_step`]).
//!
//! `kernel_bench 2 stream` is decode's matrix work out of cache: 22 TinyLlama-1.1B layers of
//! packed matrices per type (545-1030 MB, well past this VM's 260 MiB L3), run token by token as
//! the model runs them (fused Q/K/V, output, fused gate/up, down) at 1 and 2 threads, next to the
//! `membw` probe (run from the same folder) at the same thread count. `HUGE=1` backs the weights
//! with transparent huge pages; `TYPES=q4_0,q6_k` picks types, `THREADS=1,2` thread counts,
//! `TOKENS=2` tokens per step (a daemon's parallel slots decode one token each in one step).

use std::time::Instant;

use engine::kernels::matmul::{matmul, matmul_many, Matrix, Product};
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
    // BEST=1: the fastest repetition, which noise on a shared machine can only slow down.
    if std::env::var("BEST").is_ok() {
        return times[0];
    }
    let med = times[times.len() / 2];
    let _ = name;
    med
}

/// A byte buffer aligned to 2 MiB, backed by transparent huge pages when `huge` (Linux, where
/// the kernel allows), as a loaded model's packed weights are, else by 4 KiB pages.
struct Weights {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl Weights {
    fn new(len: usize, huge: bool) -> Weights {
        const ALIGN: usize = 2 << 20;
        let mut raw: Vec<u8> = Vec::with_capacity(len + ALIGN);
        let start = raw.as_ptr().align_offset(ALIGN);
        #[cfg(target_os = "linux")]
        if huge {
            extern "C" {
                fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
            }
            const MADV_HUGEPAGE: i32 = 14;
            // SAFETY: the range lies in `raw`'s allocation; the advice is only a hint.
            unsafe {
                madvise(
                    raw.as_mut_ptr().add(start).cast(),
                    len / ALIGN * ALIGN,
                    MADV_HUGEPAGE,
                )
            };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = huge;
        raw.resize(len + ALIGN, 0);
        Weights { raw, start, len }
    }

    fn bytes(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// The `membw` probe's GB/s at `threads` threads (the example built next to this one).
fn probe(threads: usize) -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("membw")));
    match exe.map(|e| std::process::Command::new(e).arg(threads.to_string()).output()) {
        Some(Ok(o)) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => "? (build the membw example)".into(),
    }
}

/// Decode's matrix work out of cache (see the module docs).
fn stream(isa: Isa) {
    // TinyLlama-1.1B: 22 layers, width 2048, 256 K/V rows, FFN 5632.
    const LAYERS: usize = 22;
    let shapes: [(usize, usize); 7] = [
        (2048, 2048),
        (2048, 256),
        (2048, 256),
        (2048, 2048),
        (2048, 5632),
        (2048, 5632),
        (5632, 2048),
    ];
    let types = std::env::var("TYPES").unwrap_or_else(|_| "q4_0,q4_k,q6_k,q8_0".into());
    let huge = std::env::var("HUGE").is_ok_and(|v| v != "0");
    let n_tok: usize = std::env::var("TOKENS").map_or(1, |v| v.parse().expect("TOKENS: a number"));
    for name in types.split(',') {
        let ty = GgmlType::from_name(name.trim()).unwrap_or_else(|| panic!("TYPES: unknown type {name}"));
        // One packed prototype per shape, copied into every layer (the layout is per matrix).
        let protos: Vec<(Vec<u8>, usize)> = shapes
            .iter()
            .map(|&(n, rows)| {
                let mut d = random_matrix(ty, n, rows);
                let p = maybe_pack(isa, ty, n, rows, &mut d);
                (d, p)
            })
            .collect();
        let layer_bytes: usize = protos.iter().map(|p| p.0.len()).sum();
        let mut weights = Weights::new(layer_bytes * LAYERS, huge);
        for layer in weights.bytes().chunks_exact_mut(layer_bytes) {
            let mut at = 0;
            for (d, _) in &protos {
                layer[at..at + d.len()].copy_from_slice(d);
                at += d.len();
            }
        }
        let data: &[u8] = weights.bytes();
        let mut mats = Vec::new();
        let mut at = 0;
        for _ in 0..LAYERS {
            for (&(n, rows), (d, packed_rows)) in shapes.iter().zip(&protos) {
                mats.push(Matrix {
                    ty,
                    n,
                    n_out: rows,
                    row_bytes: ty.row_bytes(n as u64).unwrap() as usize,
                    data: &data[at..at + d.len()],
                    packed_rows: *packed_rows,
                });
                at += d.len();
            }
        }
        let at_ty = vec_dot_type(ty);
        let act = |n: usize| {
            let arb = at_ty.row_bytes(n as u64).unwrap() as usize;
            let mut xq = vec![0u8; arb * n_tok];
            for (t, row) in xq.chunks_exact_mut(arb).enumerate() {
                let x: Vec<f32> = (0..n).map(|i| ((i + 7 * t) as f32 * 0.37).sin()).collect();
                quantize_act(isa, at_ty, &x, row);
            }
            xq
        };
        let (x_dim, x_ffn) = (act(2048), act(5632));
        let mut outs: Vec<Vec<f32>> = shapes.iter().map(|&(_, rows)| vec![0f32; rows * n_tok]).collect();
        let counts = std::env::var("THREADS").unwrap_or_else(|_| "1,2".into());
        for threads in counts
            .split(',')
            .map(|t| t.trim().parse::<usize>().expect("THREADS"))
        {
            let pool = ThreadPool::new(threads).unwrap();
            let bw = probe(threads);
            let t = bench(
                "stream",
                &mut || {
                    for l in mats.chunks_exact(7) {
                        let [q, k, v, o, g, u, d] = &mut outs[..] else {
                            unreachable!()
                        };
                        let mut qkv =
                            [(l[0], q), (l[1], k), (l[2], v)].map(|(w, out)| Product { w, xq: &x_dim, out });
                        matmul_many(&pool, isa, n_tok, &mut qkv);
                        matmul(&pool, isa, &l[3], &x_dim, n_tok, o);
                        let mut gu = [(l[4], g), (l[5], u)].map(|(w, out)| Product { w, xq: &x_dim, out });
                        matmul_many(&pool, isa, n_tok, &mut gu);
                        matmul(&pool, isa, &l[6], &x_ffn, n_tok, d);
                    }
                },
                9,
            );
            let gbs = data.len() as f64 / t / 1e9;
            println!(
                "stream {ty:5} {:6.1} MB {}, {threads} thread(s), {n_tok} token(s): {:7.2} ms/step {gbs:6.1} GB/s, membw probe {bw} GB/s",
                data.len() as f64 / 1e6,
                if huge { "huge pages" } else { "4 KiB pages" },
                t * 1e3,
            );
        }
    }
}

/// Twelve independent `vpdpbusd` chains (more than its latency times its throughput), `n`
/// rounds; returns the sum so that nothing is optimized away.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn vpdpbusd_chains(n: usize, w: i8, x: i8) -> i32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 12];
    let (w, x) = (_mm512_set1_epi8(w), _mm512_set1_epi8(x));
    for _ in 0..n {
        for a in &mut acc {
            *a = _mm512_dpbusd_epi32(*a, w, x);
        }
    }
    acc.iter()
        .map(|&a| _mm512_reduce_add_epi32(a))
        .fold(0i32, i32::wrapping_add)
}

/// `n` rounds of the packed batch kernel's step for a 16-value sub-block of 2 groups x 4 tokens
/// (`sb_tile_rows`), in registers: 8 accumulators copied from their offset sums, 4 `vpdpbusd`
/// each, then per accumulator one conversion to f32 and one multiply-add by the rows' scales.
/// Written in assembly: from intrinsics the compiler merges the 8 identical chains.
///
/// # Safety
/// The CPU has AVX-512 VNNI.
#[cfg(target_arch = "x86_64")]
unsafe fn sub16_step(n: usize) {
    // SAFETY: only registers are touched (all declared clobbered); the CPU has AVX-512 VNNI
    // (this fn's contract). zmm29-31 hold whatever they held: the values do not matter, only
    // the work.
    unsafe {
        std::arch::asm!(
            "vpxord zmm14, zmm14, zmm14", "vpxord zmm15, zmm15, zmm15",
            "vpxord zmm16, zmm16, zmm16", "vpxord zmm17, zmm17, zmm17",
            "vpxord zmm18, zmm18, zmm18", "vpxord zmm19, zmm19, zmm19",
            "vpxord zmm20, zmm20, zmm20", "vpxord zmm21, zmm21, zmm21",
            "vpxord zmm28, zmm28, zmm28",
            "2:",
            "vmovdqa64 zmm1, zmm29", "vmovdqa64 zmm2, zmm29", "vmovdqa64 zmm3, zmm29",
            "vmovdqa64 zmm4, zmm29", "vmovdqa64 zmm5, zmm29", "vmovdqa64 zmm6, zmm29",
            "vmovdqa64 zmm7, zmm29", "vmovdqa64 zmm8, zmm29",
            ".rept 4",
            "vpdpbusd zmm1, zmm30, zmm31", "vpdpbusd zmm2, zmm30, zmm31",
            "vpdpbusd zmm3, zmm30, zmm31", "vpdpbusd zmm4, zmm30, zmm31",
            "vpdpbusd zmm5, zmm30, zmm31", "vpdpbusd zmm6, zmm30, zmm31",
            "vpdpbusd zmm7, zmm30, zmm31", "vpdpbusd zmm8, zmm30, zmm31",
            ".endr",
            "vcvtdq2ps zmm1, zmm1", "vfmadd231ps zmm14, zmm1, zmm28",
            "vcvtdq2ps zmm2, zmm2", "vfmadd231ps zmm15, zmm2, zmm28",
            "vcvtdq2ps zmm3, zmm3", "vfmadd231ps zmm16, zmm3, zmm28",
            "vcvtdq2ps zmm4, zmm4", "vfmadd231ps zmm17, zmm4, zmm28",
            "vcvtdq2ps zmm5, zmm5", "vfmadd231ps zmm18, zmm5, zmm28",
            "vcvtdq2ps zmm6, zmm6", "vfmadd231ps zmm19, zmm6, zmm28",
            "vcvtdq2ps zmm7, zmm7", "vfmadd231ps zmm20, zmm7, zmm28",
            "vcvtdq2ps zmm8, zmm8", "vfmadd231ps zmm21, zmm8, zmm28",
            "dec {n}", "jnz 2b",
            n = inout(reg) n => _,
            out("zmm1") _, out("zmm2") _, out("zmm3") _, out("zmm4") _,
            out("zmm5") _, out("zmm6") _, out("zmm7") _, out("zmm8") _,
            out("zmm14") _, out("zmm15") _, out("zmm16") _, out("zmm17") _,
            out("zmm18") _, out("zmm19") _, out("zmm20") _, out("zmm21") _, out("zmm28") _,
            options(nostack, nomem),
        );
    }
}

/// The int8 multiply-add ceiling per thread, all threads at once (see the module doc).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn peak(pool: &ThreadPool) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512vnni") {
        const ROUNDS: usize = 50_000_000;
        let best = (0..5)
            .map(|_| {
                let t = Instant::now();
                pool.run(|_| {
                    // SAFETY: the CPU has AVX-512 VNNI (checked above).
                    std::hint::black_box(unsafe { vpdpbusd_chains(ROUNDS, std::hint::black_box(3), 1) });
                });
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min);
        let macs = (ROUNDS * 12 * 64) as f64;
        println!("vpdpbusd zmm chains: {:6.1} GMAC/s per thread", macs / best / 1e9);
        const STEPS: usize = 10_000_000;
        let best = (0..5)
            .map(|_| {
                let t = Instant::now();
                // SAFETY: the CPU has AVX-512 VNNI (checked above).
                pool.run(|_| unsafe { sub16_step(STEPS) });
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min);
        let macs = (STEPS * 32 * 64) as f64;
        println!(
            "16-value sub-block step (32 vpdpbusd, 8 cvt, 8 fma): {:6.1} GMAC/s per thread",
            macs / best / 1e9
        );
        return;
    }
    println!("peak: needs AVX-512 VNNI");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let which = args.get(2).cloned().unwrap_or_default();
    let pool = ThreadPool::new(threads).unwrap();
    let isa = Isa::active();
    println!("isa {isa}, {threads} threads");
    if which == "stream" {
        stream(isa);
        return;
    }
    if which == "peak" {
        peak(&pool);
        return;
    }
    let gemv_cases: &[(&str, GgmlType, usize, usize)] = &[
        ("gemma lm head", GgmlType::Q8_0, 640, 262144),
        ("qwen lm head", GgmlType::Q8_0, 896, 151936),
        ("q5_0 2048x640", GgmlType::Q5_0, 640, 2048 * 16),
        ("q4_0 2048x5632", GgmlType::Q4_0, 2048, 5632 * 8),
        ("q2_k 2048x5632", GgmlType::Q2_K, 2048, 5632 * 8),
        ("q3_k 2048x5632", GgmlType::Q3_K, 2048, 5632 * 8),
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
            (GgmlType::Q2_K, 2048, 2048),
            (GgmlType::Q3_K, 2048, 2048),
            (GgmlType::Q4_K, 2048, 2048),
            (GgmlType::Q5_K, 2048, 2048),
            (GgmlType::Q6_K, 2048, 2048),
            (GgmlType::Q6_K, 5632, 2048),
            (GgmlType::Q4_K, 5632, 2048),
        ];
        let tokens = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(512usize);
        // An optional fourth argument keeps one weight type (e.g. `q6_K`), for profiles.
        let only = args.get(4);
        for &(ty, n, rows) in cases {
            if only.is_some_and(|o| GgmlType::from_name(o) != Some(ty)) {
                continue;
            }
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
