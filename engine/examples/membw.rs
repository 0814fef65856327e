//! The machine's streaming read bandwidth: `membw [THREADS] [MIB_PER_THREAD]` prints GB/s, the
//! best of several passes in which every thread sums its own buffer (far larger than the caches)
//! with several independent accumulators. This is the ceiling for decoding, which reads every
//! weight once per token; `bench/compare.sh` prints tg as a share of it.

use std::time::Instant;

fn sum(buf: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    for c in buf.chunks_exact(8) {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    acc.iter().fold(0, |a, b| a.wrapping_add(*b))
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let threads = args.first().copied().unwrap_or(2).max(1);
    let mib = args.get(1).copied().unwrap_or(512).max(1);
    let words = mib * 1024 * 1024 / 8;
    let bufs: Vec<Vec<u64>> = (0..threads)
        .map(|t| (0..words as u64).map(|i| i ^ t as u64).collect())
        .collect();
    let mut best = 0f64;
    let mut check = 0u64;
    for _ in 0..6 {
        let start = std::sync::Barrier::new(threads);
        let t0 = Instant::now();
        let sums: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = bufs
                .iter()
                .map(|b| {
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        sum(b)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let secs = t0.elapsed().as_secs_f64();
        check ^= sums.iter().fold(0, |a, b| a ^ b);
        best = best.max((threads * words * 8) as f64 / secs / 1e9);
    }
    // Printing the checksum keeps the sums from being optimized away.
    eprintln!("membw: {threads} threads x {mib} MiB, checksum {check:x}");
    println!("{best:.1}");
}
