//! Attention on one thread, of a decode step at depth or of a prompt:
//!
//! - `attn_bench [cells] [heads] [kv_heads] [head_dim] [layers] [reps]` (default 4096 cells and
//!   Qwen2.5 0.5B's 14 query heads of 2 KV heads of 64, 24 layers, 20 tokens). Each "token"
//!   attends one query row over every cell of every layer's own F16 cache (`KV=q8_0` in the
//!   environment: Q8_0), one KV head's query
//!   heads per call as the forward pass does, so the caches (50 MB for the default shape) come
//!   from memory as in a real decode step. Prints milliseconds per token (the best and the
//!   median over `reps`) and the rate at which the cache is read.
//! - `attn_bench prefill [tokens] [heads] [kv_heads] [head_dim] [reps]` (default 512 tokens and
//!   TinyLlama's 32 query heads of 4 KV heads of 64, 10 reps): one layer of a prompt's causal
//!   attention, in the forward pass's tasks (tiles of [`tile_rows`] rows x one KV head's query
//!   heads). Prints milliseconds per layer (best and median) and the multiply-adds' rate
//!   (scores and weighted values of the visible cells).

use std::time::Instant;

use engine::ops::attention::{attend_tile, tile_rows, AttnShape, KvView, TileScratch, Visible};
use engine::quant::GgmlType;

/// `n` random finite f16 values in [-1, 1) (sign, exponent below 15, any mantissa), as bytes.
fn random_f16(n: usize, seed: &mut u64) -> Vec<u8> {
    (0..n)
        .flat_map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            let bits = (*seed as u16 & 0x83ff) | ((*seed >> 16) as u16 % 15) << 10;
            bits.to_le_bytes()
        })
        .collect()
}

/// The cache's type: `KV=q8_0` in the environment, else F16.
fn kv_type() -> GgmlType {
    std::env::var("KV").map_or(GgmlType::F16, |v| {
        GgmlType::from_name(&v).unwrap_or_else(|| panic!("KV: unknown type {v}"))
    })
}

/// `bytes` of cache of type `ty`: random f16 values, or Q8_0 blocks of a random f16 scale and
/// random quants.
fn random_cache(ty: GgmlType, bytes: usize, seed: &mut u64) -> Vec<u8> {
    let mut b = random_f16(bytes / 2, seed);
    if ty == GgmlType::Q8_0 {
        let scales = random_f16(bytes / 34, seed);
        for (blk, d) in b.chunks_exact_mut(34).zip(scales.chunks_exact(2)) {
            blk[..2].copy_from_slice(d);
        }
    }
    b
}

/// The best and the median of `reps` timings of `f`, in milliseconds, after one warm-up call.
fn time_ms(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    let mut ms: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms[0], ms[ms.len() / 2])
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let prefill_mode = args.first().is_some_and(|a| a == "prefill");
    if prefill_mode {
        args.remove(0);
    }
    let args: Vec<usize> = args.iter().map(|a| a.parse().expect("numbers")).collect();
    if prefill_mode {
        let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
        prefill(arg(0, 512), arg(1, 32), arg(2, 4), arg(3, 64), arg(4, 10));
        return;
    }
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (n_cells, nh, nkv, dk, layers, reps) = (
        arg(0, 4096),
        arg(1, 14),
        arg(2, 2),
        arg(3, 64),
        arg(4, 24),
        arg(5, 20),
    );
    assert!(
        nkv > 0 && nh % nkv == 0,
        "query heads must be a multiple of KV heads"
    );
    let ty = kv_type();
    let half = n_cells * nkv * ty.row_bytes(dk as u64).expect("whole blocks per head") as usize;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let caches: Vec<(Vec<u8>, Vec<u8>)> = (0..layers)
        .map(|_| {
            (
                random_cache(ty, half, &mut seed),
                random_cache(ty, half, &mut seed),
            )
        })
        .collect();
    let q: Vec<f32> = (0..nh * dk)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let cells: Vec<u32> = (0..n_cells as u32).collect();
    let cells = Visible::new(&cells);
    let shape = AttnShape {
        n_head: nh,
        n_kv_head: nkv,
        head_dim_k: dk,
        head_dim_v: dk,
        kq_scale: 1.0 / (dk as f32).sqrt(),
        softcap: 0.0,
    };
    let group = nh / nkv;
    let mut out = vec![0f32; nh * dk];
    let mut scratch = TileScratch::default();
    let token = || {
        for (k, v) in &caches {
            let kv = KvView { ty, k, v };
            for kvh in 0..nkv {
                let mut slots: Vec<Option<&mut [f32]>> = out.chunks_exact_mut(dk).map(Some).collect();
                attend_tile(
                    &[&q],
                    kv,
                    &[cells],
                    &shape,
                    kvh * group..(kvh + 1) * group,
                    &mut scratch,
                    |_, h| slots[h].take().expect("each head once"),
                );
            }
        }
    };
    let (best, median) = time_ms(reps, token);
    let bytes = (2 * half * layers) as f64;
    println!(
        "{n_cells} cells, {nh}/{nkv} heads of {dk}, {layers} layers: best {best:.3} ms, median {median:.3} ms per token ({:.1} GB/s of cache)",
        bytes / best / 1e6
    );
}

/// One layer of a `tokens`-token prompt's causal attention (see the module doc).
fn prefill(tokens: usize, nh: usize, nkv: usize, dk: usize, reps: usize) {
    assert!(
        tokens > 0 && nkv > 0 && nh.is_multiple_of(nkv),
        "tokens > 0, and query heads a multiple of KV heads"
    );
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let (k, v) = (
        random_f16(tokens * nkv * dk, &mut seed),
        random_f16(tokens * nkv * dk, &mut seed),
    );
    let kv = KvView {
        ty: GgmlType::F16,
        k: &k,
        v: &v,
    };
    let q: Vec<f32> = (0..tokens * nh * dk)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let lists: Vec<Vec<u32>> = (0..tokens as u32).map(|t| (0..=t).collect()).collect();
    let visible: Vec<Visible> = lists.iter().map(|v| Visible::new(v)).collect();
    let shape = AttnShape {
        n_head: nh,
        n_kv_head: nkv,
        head_dim_k: dk,
        head_dim_v: dk,
        kq_scale: 1.0 / (dk as f32).sqrt(),
        softcap: 0.0,
    };
    let group = nh / nkv;
    let mut out = vec![0f32; tokens * nh * dk];
    let mut scratch = TileScratch::default();
    let (best, median) = time_ms(reps, || {
        let rows = tile_rows(group);
        for r0 in (0..tokens).step_by(rows) {
            let r1 = (r0 + rows).min(tokens);
            let qs: Vec<&[f32]> = q[r0 * nh * dk..r1 * nh * dk].chunks_exact(nh * dk).collect();
            let cells = &visible[r0..r1];
            let tile = &mut out[r0 * nh * dk..r1 * nh * dk];
            for kvh in 0..nkv {
                let mut slots: Vec<Option<&mut [f32]>> = tile.chunks_exact_mut(dk).map(Some).collect();
                attend_tile(
                    &qs,
                    kv,
                    cells,
                    &shape,
                    kvh * group..(kvh + 1) * group,
                    &mut scratch,
                    |r, h| slots[r * nh + h].take().expect("each (row, head) once"),
                );
            }
        }
    });
    // Two multiply-adds per visible cell and head dimension (a score, a weighted value).
    let macs = (tokens * (tokens + 1) / 2 * nh * dk * 2) as f64;
    println!(
        "prefill of {tokens} tokens, {nh}/{nkv} heads of {dk}, one layer: best {best:.3} ms, median {median:.3} ms ({:.1} GFLOP/s)",
        2.0 * macs / best / 1e6
    );
}
