//! The machine's streaming read bandwidth, the ceiling for decoding (which reads every weight once
//! per token); `bench/compare.sh` prints tg as a share of it.
//!
//!     membw [THREADS] [MIB] [PASSES]
//!
//! prints GB/s: the best of PASSES (default 10) passes over one buffer of MIB MiB (default 1024,
//! far larger than the caches), each thread reading its own contiguous share as a decode step
//! reads its rows, with 256-bit (AVX2) or 512-bit (AVX-512) loads into independent accumulators
//! where the CPU has them. The threads are started once and meet at a barrier before each pass,
//! so a pass times the reads alone. The buffer is written before the first pass (no page faults
//! are timed) and backed by transparent huge pages where the kernel allows (fewer TLB misses, as
//! a read of the mapped model file gets from the kernel's read-ahead of whole pages).

use std::sync::Barrier;
use std::time::Instant;

/// Sums `buf` with scalar loads (any CPU).
fn sum_scalar(buf: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    for c in buf.chunks_exact(8) {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    acc.iter().fold(0, |a, b| a.wrapping_add(*b))
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Sums `buf` (a whole number of 256-byte lines) with 256-bit loads into 8 accumulators.
    #[target_feature(enable = "avx2")]
    pub unsafe fn sum_avx2(buf: &[u64]) -> u64 {
        let p = buf.as_ptr() as *const __m256i;
        let mut a = [_mm256_setzero_si256(); 8];
        for i in (0..buf.len() / 4).step_by(8) {
            for (k, acc) in a.iter_mut().enumerate() {
                *acc = _mm256_add_epi64(*acc, _mm256_loadu_si256(p.add(i + k)));
            }
        }
        let mut x = _mm256_setzero_si256();
        for acc in a {
            x = _mm256_add_epi64(x, acc);
        }
        let mut out = [0u64; 4];
        _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, x);
        out.iter().fold(0, |s, v| s.wrapping_add(*v))
    }

    /// Sums `buf` (a whole number of 512-byte blocks) with 512-bit loads into 8 accumulators.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn sum_avx512(buf: &[u64]) -> u64 {
        let p = buf.as_ptr() as *const __m512i;
        let mut a = [_mm512_setzero_si512(); 8];
        for i in (0..buf.len() / 8).step_by(8) {
            for (k, acc) in a.iter_mut().enumerate() {
                *acc = _mm512_add_epi64(*acc, _mm512_loadu_si512(p.add(i + k)));
            }
        }
        let mut x = _mm512_setzero_si512();
        for acc in a {
            x = _mm512_add_epi64(x, acc);
        }
        let mut out = [0u64; 8];
        _mm512_storeu_si512(out.as_mut_ptr() as *mut __m512i, x);
        out.iter().fold(0, |s, v| s.wrapping_add(*v))
    }
}

/// The widest reader the CPU has, and its name.
fn reader() -> (fn(&[u64]) -> u64, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was detected; shares are whole 512-byte blocks (see `main`).
            return (|b| unsafe { x86::sum_avx512(b) }, "avx512");
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above.
            return (|b| unsafe { x86::sum_avx2(b) }, "avx2");
        }
    }
    (sum_scalar, "scalar")
}

/// A 2 MiB-aligned buffer of u64s, backed by huge pages where the kernel allows (Linux).
struct Buffer {
    ptr: *mut u64,
    words: usize,
    layout: std::alloc::Layout,
}

impl Buffer {
    fn new(words: usize) -> Buffer {
        let layout = std::alloc::Layout::from_size_align(words * 8, 2 << 20).expect("buffer size");
        // SAFETY: the layout has a non-zero size (`main` asks for at least one block).
        let ptr = unsafe { std::alloc::alloc(layout) } as *mut u64;
        assert!(!ptr.is_null(), "out of memory");
        #[cfg(target_os = "linux")]
        {
            extern "C" {
                fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
            }
            const MADV_HUGEPAGE: i32 = 14;
            // SAFETY: the range is this allocation; the advice is only a hint.
            unsafe { madvise(ptr.cast(), words * 8, MADV_HUGEPAGE) };
        }
        for i in 0..words {
            // SAFETY: in bounds of the allocation; written before any read.
            unsafe { ptr.add(i).write(i as u64) };
        }
        Buffer { ptr, words, layout }
    }

    fn as_slice(&self) -> &[u64] {
        // SAFETY: `words` initialized u64s, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.words) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.cast(), self.layout) };
    }
}

// SAFETY: the buffer is only read after `new` returns.
unsafe impl Sync for Buffer {}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let threads = args.first().copied().unwrap_or(2).max(1);
    let mib = args.get(1).copied().unwrap_or(1024).max(threads);
    let passes = args.get(2).copied().unwrap_or(10).max(1);
    let (read, isa) = reader();
    // Shares are whole 512-byte blocks (64 words).
    let words = mib * 1024 * 1024 / 8 / (64 * threads) * (64 * threads);
    let buffer = Buffer::new(words);
    let buf = buffer.as_slice();
    let share = words / threads;
    let barrier = Barrier::new(threads);
    let mut best = 0f64;
    let mut check = 0u64;
    std::thread::scope(|s| {
        let hs: Vec<_> = (1..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut x = 0;
                    for _ in 0..passes {
                        barrier.wait();
                        x = read(&buf[t * share..(t + 1) * share]).wrapping_add(x);
                        barrier.wait();
                    }
                    x
                })
            })
            .collect();
        for _ in 0..passes {
            barrier.wait();
            let t0 = Instant::now();
            check = check.wrapping_add(read(&buf[..share]));
            barrier.wait();
            let secs = t0.elapsed().as_secs_f64();
            best = best.max((words * 8) as f64 / secs / 1e9);
        }
        for h in hs {
            check = check.wrapping_add(h.join().expect("reader thread"));
        }
    });
    // Printing the checksum keeps the reads from being optimized away.
    eprintln!("membw: {threads} threads, {mib} MiB, {passes} passes, {isa} loads, checksum {check:x}");
    println!("{best:.1}");
}
