//! Scaled dot-product attention of query rows over the cached keys and values of one layer.
//!
//! The cost per query is linear in the number of visible cells; query heads that share a KV
//! head (GQA) read the same rows. Numerics follow llama.cpp's CPU path without flash attention:
//! with an F16 cache the query is rounded to f16 for the K dot products (as `mul_mat` converts it
//! to K's format) and the softmax weights are rounded to f16 before weighting V; with a Q8_0
//! cache the query is quantized to Q8_0 blocks and V rows are dequantized. Sums are in f32, the
//! softmax denominator in f64.

use std::ops::Range;

use half::slice::HalfFloatSliceExt;

use super::dot::{dequantize_row, f16_to_f32, quantize_row, vec_dot, vec_dot_type};
use crate::quant::GgmlType;

/// One layer's cache: row `c` of `k` (`v`) holds the keys (values) of cell `c` for every KV head,
/// head after head, in `ty`.
#[derive(Clone, Copy)]
pub struct KvView<'a> {
    pub ty: GgmlType,
    pub k: &'a [u8],
    pub v: &'a [u8],
}

/// The shape and scaling of one layer's attention.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// Multiplies the (soft-capped) scores before the softmax.
    pub kq_scale: f32,
    /// Attention logit soft-capping `c * tanh(s / c)`; 0 disables it.
    pub softcap: f32,
}

/// Converts a row of little-endian f16 values (F16C when the CPU has it).
fn f16_row(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: any bit pattern is a valid u16; `align_to` only yields the aligned middle part.
    let (pre, mid, post) = unsafe { bytes.align_to::<u16>() };
    if pre.is_empty() && post.is_empty() && cfg!(target_endian = "little") {
        let halves: &[half::f16] = bytemuck_u16(mid);
        halves.convert_to_f32_slice(out);
    } else {
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
        }
    }
}

fn bytemuck_u16(x: &[u16]) -> &[half::f16] {
    // SAFETY: `half::f16` is `repr(transparent)` over `u16`.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast(), x.len()) }
}

/// Reusable buffers of one worker.
#[derive(Default)]
pub struct Scratch {
    scores: Vec<f32>,
    q: Vec<u8>,
    v: Vec<f32>,
}

/// Attention of one token: `q` holds its `n_head` query heads, `cells` the cache cells it may
/// see; writes `n_head * head_dim_v` values to `out`.
pub fn attend(
    q: &[f32],
    kv: KvView,
    cells: &[u32],
    shape: &AttnShape,
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    assert_eq!(out.len(), shape.n_head * shape.head_dim_v);
    for (h, o) in out.chunks_exact_mut(shape.head_dim_v).enumerate() {
        attend_head(q, kv, cells, shape, h, scratch, o);
    }
}

/// Query head `h` of one token (`q` holds all its heads): writes `head_dim_v` values to `out`.
/// The plain reference that [`attend_tile`], which the forward pass uses, is tested against.
pub fn attend_head(
    q: &[f32],
    kv: KvView,
    cells: &[u32],
    shape: &AttnShape,
    h: usize,
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    let AttnShape {
        n_head,
        n_kv_head,
        head_dim_k: dk,
        head_dim_v: dv,
        kq_scale,
        softcap,
    } = *shape;
    assert!(n_kv_head > 0 && n_head % n_kv_head == 0 && h < n_head);
    assert_eq!(q.len(), n_head * dk);
    assert_eq!(out.len(), dv);
    let group = n_head / n_kv_head;
    let k_head = kv
        .ty
        .row_bytes(dk as u64)
        .expect("KV head size fits the cache type") as usize;
    let v_head = kv
        .ty
        .row_bytes(dv as u64)
        .expect("KV head size fits the cache type") as usize;
    let (k_row, v_row) = (k_head * n_kv_head, v_head * n_kv_head);
    let q_ty = vec_dot_type(kv.ty);
    let q_bytes = q_ty
        .row_bytes(dk as u64)
        .expect("head size fits the query format") as usize;
    scratch.scores.resize(cells.len(), 0.0);
    scratch.q.resize(q_bytes, 0);
    scratch.v.resize(dv, 0.0);
    out.fill(0.0);
    if cells.is_empty() {
        return;
    }
    let kvh = h / group;
    quantize_row(q_ty, &q[h * dk..(h + 1) * dk], &mut scratch.q);
    let mut max = f32::NEG_INFINITY;
    for (s, &c) in scratch.scores.iter_mut().zip(cells) {
        let off = c as usize * k_row + kvh * k_head;
        let mut x = vec_dot(kv.ty, dk, &kv.k[off..off + k_head], &scratch.q);
        if softcap > 0.0 {
            x = softcap * (x / softcap).tanh();
        }
        x *= kq_scale;
        *s = x;
        max = max.max(x);
    }
    let mut sum = 0f64;
    for s in scratch.scores.iter_mut() {
        *s = (*s - max).exp();
        sum += f64::from(*s);
    }
    let inv = (1.0 / sum) as f32;
    for (&p, &c) in scratch.scores.iter().zip(cells) {
        let off = c as usize * v_row + kvh * v_head;
        let vrow = &kv.v[off..off + v_head];
        let p = if kv.ty == GgmlType::F16 {
            f16_row(vrow, &mut scratch.v);
            // llama.cpp multiplies V with the softmax weights converted to f16.
            f16_to_f32(half::f16::from_f32(p * inv).to_bits())
        } else {
            dequantize_row(kv.ty, vrow, &mut scratch.v);
            p * inv
        };
        for (acc, v) in out.iter_mut().zip(&scratch.v) {
            *acc += p * v;
        }
    }
}

/// Query rows of one tile of [`attend_tile`]: with the query heads of a KV head, the queries that
/// share each K row read and each V row conversion.
pub const TILE_ROWS: usize = 8;
/// Cells per block of values: a block's V rows, converted to f32, stay in cache while every
/// query of the tile takes them in.
const BLOCK_CELLS: usize = 64;

/// Reusable buffers of one worker for [`attend_tile`].
#[derive(Default)]
pub struct TileScratch {
    cells: Vec<u32>,
    q: Vec<u8>,
    probs: Vec<f32>,
    v: Vec<f32>,
    acc: Vec<f32>,
}

/// Attention of a tile of query rows for query heads `heads` (all of one KV head's group): each K
/// row is read once for all queries of the tile (GQA: a KV head's query heads, and the tile's
/// rows), each V row converted to f32 once, in blocks of cells that stay in cache.
///
/// `q[r]` holds all `n_head` query heads of row `r`; `cells[r]` the cells row `r` may see, in
/// ascending order (the causal and sliding-window masks are these lists). Writes `head_dim_v`
/// values per (row, head) through `out(r, h)`.
///
/// Every query sees the same operations in the same order as in [`attend_head`] (scores in the
/// cache's dot format, then the softmax over the visible ones, then the weighted values in cell
/// order), so the result is the same bits whatever the tile: a prompt evaluated in one batch, in
/// chunks or token by token gives the same logits.
pub fn attend_tile<'o>(
    q: &[&[f32]],
    kv: KvView,
    cells: &[&[u32]],
    shape: &AttnShape,
    heads: Range<usize>,
    scratch: &mut TileScratch,
    mut out: impl FnMut(usize, usize) -> &'o mut [f32],
) {
    let AttnShape {
        n_head,
        n_kv_head,
        head_dim_k: dk,
        head_dim_v: dv,
        kq_scale,
        softcap,
    } = *shape;
    assert!(n_kv_head > 0 && n_head % n_kv_head == 0 && heads.end <= n_head && !heads.is_empty());
    let group = n_head / n_kv_head;
    let kvh = heads.start / group;
    assert_eq!((heads.end - 1) / group, kvh, "heads of one KV head");
    assert_eq!(q.len(), cells.len());
    let n_heads = heads.len();
    let nq = q.len() * n_heads;
    let row_bytes = |n: usize| {
        kv.ty
            .row_bytes(n as u64)
            .expect("KV head size fits the cache type") as usize
    };
    let (k_head, v_head) = (row_bytes(dk), row_bytes(dv));
    let (k_row, v_row) = (k_head * n_kv_head, v_head * n_kv_head);
    let q_ty = vec_dot_type(kv.ty);
    let q_bytes = q_ty
        .row_bytes(dk as u64)
        .expect("head size fits the query format") as usize;
    let sc = scratch;

    // The union of the rows' visible cells, ascending.
    sc.cells.clear();
    for c in cells {
        sc.cells.extend_from_slice(c);
    }
    sc.cells.sort_unstable();
    sc.cells.dedup();
    let nu = sc.cells.len();

    // Queries in the dot format; query i is (row i / n_heads, head heads.start + i % n_heads).
    sc.q.resize(nq * q_bytes, 0);
    for (i, qb) in sc.q.chunks_exact_mut(q_bytes).enumerate() {
        let h = heads.start + i % n_heads;
        let qr = q[i / n_heads];
        assert_eq!(qr.len(), n_head * dk);
        quantize_row(q_ty, &qr[h * dk..(h + 1) * dk], qb);
    }

    // Scores over the union (a cell a row may not see scores -inf), K rows read once per tile.
    sc.probs.clear();
    sc.probs.resize(nq * nu, f32::NEG_INFINITY);
    for (r, visible) in cells.iter().enumerate() {
        let mut cur = 0;
        for (j, &c) in sc.cells.iter().enumerate() {
            if visible.get(cur) != Some(&c) {
                continue;
            }
            cur += 1;
            let off = c as usize * k_row + kvh * k_head;
            let k = &kv.k[off..off + k_head];
            for g in 0..n_heads {
                let i = r * n_heads + g;
                let mut x = vec_dot(kv.ty, dk, k, &sc.q[i * q_bytes..(i + 1) * q_bytes]);
                if softcap > 0.0 {
                    x = softcap * (x / softcap).tanh();
                }
                sc.probs[i * nu + j] = x * kq_scale;
            }
        }
    }
    // Softmax of each query over its visible cells (as `attend_head`: f64 denominator, weights
    // rounded to f16 with an F16 cache). Masked cells get weight 0 and are skipped below, as a
    // weight that rounds to 0 would add nothing.
    for p in sc.probs.chunks_exact_mut(nu.max(1)).take(nq) {
        let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            p.fill(0.0);
            continue;
        }
        let mut sum = 0f64;
        for s in p.iter_mut() {
            *s = (*s - max).exp();
            sum += f64::from(*s);
        }
        let inv = (1.0 / sum) as f32;
        for s in p.iter_mut() {
            *s = if kv.ty == GgmlType::F16 {
                f16_to_f32(half::f16::from_f32(*s * inv).to_bits())
            } else {
                *s * inv
            };
        }
    }
    // Weighted values, block by block of cells.
    sc.acc.clear();
    sc.acc.resize(nq * dv, 0.0);
    sc.v.resize(BLOCK_CELLS * dv, 0.0);
    for (b, block) in sc.cells.chunks(BLOCK_CELLS).enumerate() {
        for (&c, vr) in block.iter().zip(sc.v.chunks_exact_mut(dv)) {
            let off = c as usize * v_row + kvh * v_head;
            let src = &kv.v[off..off + v_head];
            if kv.ty == GgmlType::F16 {
                f16_row(src, vr);
            } else {
                dequantize_row(kv.ty, src, vr);
            }
        }
        let j0 = b * BLOCK_CELLS;
        for (i, acc) in sc.acc.chunks_exact_mut(dv).enumerate() {
            let p = &sc.probs[i * nu + j0..i * nu + j0 + block.len()];
            for (&w, vr) in p.iter().zip(sc.v.chunks_exact(dv)) {
                if w != 0.0 {
                    axpy(w, vr, acc);
                }
            }
        }
    }
    for (i, acc) in sc.acc.chunks_exact(dv).enumerate() {
        let o = out(i / n_heads, heads.start + i % n_heads);
        o.copy_from_slice(acc);
    }
}

/// `acc += w * v`, in lanes the compiler vectorizes.
fn axpy(w: f32, v: &[f32], acc: &mut [f32]) {
    const L: usize = 16;
    let n = v.len() / L * L;
    for (a, x) in acc[..n].chunks_exact_mut(L).zip(v[..n].chunks_exact(L)) {
        for k in 0..L {
            a[k] += w * x[k];
        }
    }
    for (a, x) in acc[n..].iter_mut().zip(&v[n..]) {
        *a += w * x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to_f16_bytes(x: &[f32]) -> Vec<u8> {
        x.iter()
            .flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes())
            .collect()
    }

    /// Reference attention in f64 over all given rows.
    fn reference(q: &[f32], k: &[Vec<f32>], v: &[Vec<f32>], scale: f32) -> Vec<f32> {
        let s: Vec<f64> = k
            .iter()
            .map(|kr| kr.iter().zip(q).map(|(a, b)| f64::from(a * b)).sum::<f64>() * f64::from(scale))
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        (0..v[0].len())
            .map(|d| (e.iter().zip(v).map(|(p, vr)| p * f64::from(vr[d])).sum::<f64>() / z) as f32)
            .collect()
    }

    #[test]
    fn gqa_heads_read_their_kv_head() {
        // 2 query heads sharing 1 KV head, 3 cells (cell 1 not visible).
        let dk = 32;
        let mk = |seed: f32| {
            (0..dk)
                .map(|i| ((i as f32 + seed) * 0.37).sin())
                .collect::<Vec<f32>>()
        };
        let (k, v): (Vec<_>, Vec<_>) = (0..3).map(|c| (mk(c as f32), mk(10.0 + c as f32))).unzip();
        let kb: Vec<u8> = k.iter().flat_map(|r| to_f16_bytes(r)).collect();
        let vb: Vec<u8> = v.iter().flat_map(|r| to_f16_bytes(r)).collect();
        let q = [mk(5.0), mk(6.0)].concat();
        let shape = AttnShape {
            n_head: 2,
            n_kv_head: 1,
            head_dim_k: dk,
            head_dim_v: dk,
            kq_scale: 0.3,
            softcap: 0.0,
        };
        let mut out = vec![0f32; 2 * dk];
        let kv = KvView {
            ty: GgmlType::F16,
            k: &kb,
            v: &vb,
        };
        attend(&q, kv, &[0, 2], &shape, &mut Scratch::default(), &mut out);
        let visible_k = [k[0].clone(), k[2].clone()];
        let visible_v = [v[0].clone(), v[2].clone()];
        for h in 0..2 {
            let r = reference(&q[h * dk..(h + 1) * dk], &visible_k, &visible_v, 0.3);
            for (a, b) in out[h * dk..(h + 1) * dk].iter().zip(&r) {
                assert!((a - b).abs() < 2e-3, "head {h}: {a} vs {b}");
            }
        }
    }

    /// splitmix64 values in [-1, 1).
    fn random(n: usize, seed: &mut u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = *seed;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// The tiled path against the per-head one on random caches: F16 with odd head sizes and
    /// Q8_0, GQA ratios 1 to 3, contexts shorter and longer than a block of cells, causal rows
    /// with a sliding window and cells of another sequence left out, soft-capping.
    #[test]
    fn tiles_match_per_head_attention() {
        let mut seed = 7;
        let cases = [
            (GgmlType::F16, 40, 24, 6, 6, 0.0),
            (GgmlType::F16, 40, 40, 6, 3, 0.0),
            (GgmlType::F16, 72, 72, 6, 2, 30.0),
            (GgmlType::Q8_0, 64, 64, 4, 2, 0.0),
        ];
        for (ty, dk, dv, nh, nkv, softcap) in cases {
            for n_cells in [1usize, 5, 70, 150] {
                for window in [None, Some(40usize)] {
                    let k_row = ty.row_bytes((nkv * dk) as u64).unwrap() as usize;
                    let v_row = ty.row_bytes((nkv * dv) as u64).unwrap() as usize;
                    let mut kb = vec![0u8; n_cells * k_row];
                    let mut vb = vec![0u8; n_cells * v_row];
                    for c in 0..n_cells {
                        quantize_row(
                            ty,
                            &random(nkv * dk, &mut seed),
                            &mut kb[c * k_row..(c + 1) * k_row],
                        );
                        quantize_row(
                            ty,
                            &random(nkv * dv, &mut seed),
                            &mut vb[c * v_row..(c + 1) * v_row],
                        );
                    }
                    let kv = KvView { ty, k: &kb, v: &vb };
                    let shape = AttnShape {
                        n_head: nh,
                        n_kv_head: nkv,
                        head_dim_k: dk,
                        head_dim_v: dv,
                        kq_scale: 1.0 / (dk as f32).sqrt(),
                        softcap,
                    };
                    // Row t sees cells up to t (every seventh belongs to another sequence),
                    // within the window.
                    let n_rows = n_cells.min(11);
                    let rows: Vec<usize> = (0..n_rows)
                        .map(|r| n_cells - 1 - r * (n_cells / n_rows))
                        .rev()
                        .collect();
                    let visible: Vec<Vec<u32>> = rows
                        .iter()
                        .map(|&t| {
                            (0..=t)
                                .filter(|&c| c % 7 != 3 && window.is_none_or(|w| t - c < w))
                                .map(|c| c as u32)
                                .collect()
                        })
                        .collect();
                    let qs: Vec<Vec<f32>> = rows
                        .iter()
                        .map(|_| random(nh * dk, &mut seed).iter().map(|x| x * 3.0).collect())
                        .collect();
                    let mut want = vec![0f32; n_rows * nh * dv];
                    for r in 0..n_rows {
                        attend(
                            &qs[r],
                            kv,
                            &visible[r],
                            &shape,
                            &mut Scratch::default(),
                            &mut want[r * nh * dv..(r + 1) * nh * dv],
                        );
                    }
                    let mut got = vec![0f32; n_rows * nh * dv];
                    let mut scratch = TileScratch::default();
                    for r0 in (0..n_rows).step_by(TILE_ROWS) {
                        let r1 = (r0 + TILE_ROWS).min(n_rows);
                        let q: Vec<&[f32]> = qs[r0..r1].iter().map(|v| v.as_slice()).collect();
                        let cells: Vec<&[u32]> = visible[r0..r1].iter().map(|v| v.as_slice()).collect();
                        for kvh in 0..nkv {
                            let mut outs: Vec<(usize, usize, Vec<f32>)> = Vec::new();
                            let mut bufs: Vec<Vec<f32>> = vec![vec![0f32; dv]; (r1 - r0) * nh];
                            let mut slots: Vec<Option<&mut Vec<f32>>> = bufs.iter_mut().map(Some).collect();
                            let g = nh / nkv;
                            attend_tile(
                                &q,
                                kv,
                                &cells,
                                &shape,
                                kvh * g..(kvh + 1) * g,
                                &mut scratch,
                                |r, h| slots[r * nh + h].take().expect("each output once").as_mut_slice(),
                            );
                            for (i, b) in bufs.into_iter().enumerate() {
                                let (r, h) = (i / nh, i % nh);
                                if h / (nh / nkv) == kvh {
                                    outs.push((r, h, b));
                                }
                            }
                            for (r, h, b) in outs {
                                let at = (r0 + r) * nh * dv + h * dv;
                                got[at..at + dv].copy_from_slice(&b);
                            }
                        }
                    }
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            a == b,
                            "{ty:?} dk {dk} heads {nh}/{nkv} cells {n_cells} window {window:?}: value {i}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
}
