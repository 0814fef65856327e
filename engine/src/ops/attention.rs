//! Scaled dot-product attention of query rows over the cached keys and values of one layer.
//!
//! The cost per query is linear in the number of visible cells; query heads that share a KV
//! head (GQA) read the same rows. Numerics follow llama.cpp's CPU path without flash attention:
//! with an F16 cache the query is rounded to f16 for the K dot products (as `mul_mat` converts it
//! to K's format) and the softmax weights are rounded to f16 before weighting V; with a Q8_0
//! cache the query is quantized to Q8_0 blocks and V rows are dequantized. Sums are in f32, the
//! softmax denominator in f64.

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
/// Heads are independent, so a token's heads can be spread over threads.
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
}
