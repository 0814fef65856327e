//! Decode attention at depth, on one thread: `attn_bench [cells] [heads] [kv_heads] [head_dim]
//! [layers] [reps]` (default 4096 cells and Qwen2.5 0.5B's 14 query heads of 2 KV heads of 64,
//! 24 layers, 20 tokens).
//!
//! Each "token" attends one query row over every cell of every layer's own F16 cache, one KV
//! head's query heads per call as the forward pass does, so the caches (50 MB for the default
//! shape) come from memory as in a real decode step. Prints milliseconds per token (the best and
//! the median over `reps`) and the rate at which the cache is read.

use std::time::Instant;

use engine::ops::attention::{attend_tile, AttnShape, KvView, TileScratch};
use engine::quant::GgmlType;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
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
    let half = n_cells * nkv * dk * 2;
    // Random finite f16 values in [-1, 1): sign, exponent below 15, any mantissa.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut random_half = || -> Vec<u8> {
        (0..half / 2)
            .flat_map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let bits = (seed as u16 & 0x83ff) | ((seed >> 16) as u16 % 15) << 10;
                bits.to_le_bytes()
            })
            .collect()
    };
    let caches: Vec<(Vec<u8>, Vec<u8>)> = (0..layers).map(|_| (random_half(), random_half())).collect();
    let q: Vec<f32> = (0..nh * dk)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let cells: Vec<u32> = (0..n_cells as u32).collect();
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
    let mut token = || {
        for (k, v) in &caches {
            let kv = KvView {
                ty: GgmlType::F16,
                k,
                v,
            };
            for kvh in 0..nkv {
                let mut slots: Vec<Option<&mut [f32]>> = out.chunks_exact_mut(dk).map(Some).collect();
                attend_tile(
                    &[&q],
                    kv,
                    &[&cells],
                    &shape,
                    kvh * group..(kvh + 1) * group,
                    &mut scratch,
                    |_, h| slots[h].take().expect("each head once"),
                );
            }
        }
    };
    token();
    let mut ms: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            token();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let bytes = (2 * half * layers) as f64;
    println!(
        "{n_cells} cells, {nh}/{nkv} heads of {dk}, {layers} layers: best {:.3} ms, median {:.3} ms per token ({:.1} GB/s of cache)",
        ms[0],
        ms[ms.len() / 2],
        bytes / ms[0] / 1e6
    );
}
