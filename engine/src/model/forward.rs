//! The shared transformer forward pass, driven by an architecture's [`Arch`] description.
//!
//! One call evaluates a micro-batch of tokens (from any number of sequences) through every layer:
//! the keys and values of all its tokens are stored in the KV cache first, then each token attends
//! to the cells its sequence may see (causal, and windowed on sliding-window layers). Only the rows
//! whose outputs are wanted go through the last layer's attention, FFN and the final norm.
//! The row-wise steps (norms, projections, FFN) take the micro-batch in chunks of [`ROW_CHUNK`]
//! rows: a 512-token prompt then needs a few MiB of work buffers, not tens.

use std::cell::RefCell;

use super::arch::{Ffn, QScale};
use super::weights::Weight;
use super::Model;
use crate::kv::{KvCache, Pos, SeqId};
use crate::ops::attention::{attend_tile, AttnShape, TileScratch, TILE_ROWS};
use crate::ops::matmul::matmul_many;
use crate::ops::norm::{rms_norm, rms_norm_inplace};
use crate::ops::rope::Rope;
use crate::ops::{act, Activations, WeightView};
use crate::threads;
use crate::TokenId;

/// Rows that go through the row-wise steps (norms, projections, FFN) together. A long batch is
/// taken in chunks of this many rows, so the step buffers (the FFN's are `n_ff` wide) stay small
/// whatever the batch size; a layer's weights stay in cache from one chunk to the next. Only the
/// residual stream, the queries and the attention output span the whole batch.
pub(crate) const ROW_CHUNK: usize = 64;

thread_local! {
    static SCRATCH: RefCell<TileScratch> = RefCell::new(TileScratch::default());
}

/// The attention output, written by the threads of a step: each (row, head) by one task.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint head slices, and the step ends before the buffer's borrow does.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// A micro-batch: at most `n_batch` tokens evaluated in one pass.
pub(crate) struct Ubatch<'a> {
    pub tokens: &'a [TokenId],
    pub pos: &'a [Pos],
    pub seq: &'a [SeqId],
    /// Rows whose final hidden state is wanted (for logits or embeddings), ascending.
    pub outputs: &'a [usize],
}

fn add_bias(x: &mut [f32], bias: Option<&Vec<f32>>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
    }
}

fn select_rows(x: &[f32], width: usize, rows: &[usize]) -> Vec<f32> {
    rows.iter()
        .flat_map(|&r| &x[r * width..(r + 1) * width])
        .copied()
        .collect()
}

impl Model {
    pub(crate) fn view(&self, w: &Weight) -> WeightView<'_> {
        let t = &self.gguf.tensors()[w.tensor];
        let rows = t.info.dims[1] as usize;
        WeightView::new(w.ty, w.n_in, rows, self.gguf.tensor_data(t))
            .expect("shapes were checked at load")
            .rows(w.row0..w.row0 + w.n_out)
            .with_packed_rows(self.packed_rows[w.tensor])
    }

    fn project(&self, w: &Weight, x: &mut Activations, bias: Option<&Vec<f32>>) -> Vec<f32> {
        let [out] = self.project_many([(w, bias)], x);
        out
    }

    /// Several projections of the same input, in one parallel step where possible.
    fn project_many<const N: usize>(
        &self,
        ws: [(&Weight, Option<&Vec<f32>>); N],
        x: &mut Activations,
    ) -> [Vec<f32>; N] {
        let mut outs = ws.map(|(w, _)| vec![0f32; x.n_tokens() * w.n_out]);
        let views = ws.map(|(w, _)| self.view(w));
        let mut slices = outs.each_mut().map(|o| o.as_mut_slice());
        matmul_many(&views, x, &mut slices);
        for (out, (_, bias)) in outs.iter_mut().zip(ws) {
            add_bias(out, bias);
        }
        outs
    }

    /// The token embeddings of `tokens` (only their rows are dequantized).
    fn embed(&self, tokens: &[TokenId]) -> Vec<f32> {
        let n_embd = self.hp.n_embd;
        let table = self.view(&self.w.token_embd);
        let mut x = vec![0f32; tokens.len() * n_embd];
        for (row, &tok) in x.chunks_exact_mut(n_embd).zip(tokens) {
            table.dequantize_row(tok as usize, row);
        }
        if self.arch.scale_embeddings {
            let s = (n_embd as f32).sqrt();
            x.iter_mut().for_each(|v| *v *= s);
        }
        x
    }

    /// Evaluates `ub`, storing its keys and values at `cells` (per KV pool, the cell of each
    /// token). Returns the final normalized hidden states of `ub.outputs`, row after row.
    pub(crate) fn forward(
        &self,
        ub: &Ubatch,
        kv: &mut KvCache,
        cells: &[Vec<u32>],
        ropes: &[Rope],
    ) -> Vec<f32> {
        let hp = &self.hp;
        let n_embd = hp.n_embd;
        let n_tokens = ub.tokens.len();
        let mut x = self.embed(ub.tokens);

        // The rotation angles of each token, once per distinct RoPE (gemma3 has two).
        let mut tables: Vec<(&Rope, Vec<f32>)> = Vec::new();
        for rope in ropes {
            if !tables.iter().any(|(r, _)| *r == rope) {
                let mut cs = vec![0f32; n_tokens * rope.n_rot];
                for (row, &p) in cs.chunks_exact_mut(rope.n_rot).zip(ub.pos) {
                    rope.cos_sin(p as f32, row);
                }
                tables.push((rope, cs));
            }
        }

        // The cells each token may see, per KV pool: the same in every layer of the pool.
        let visible: Vec<Vec<Vec<u32>>> = kv
            .pools()
            .iter()
            .map(|cells| {
                (0..n_tokens)
                    .map(|t| {
                        let mut v = Vec::new();
                        cells.visible(ub.seq[t], ub.pos[t], &mut v);
                        v
                    })
                    .collect()
            })
            .collect();

        let last = hp.n_layer - 1;
        let mut rows: Vec<usize> = (0..n_tokens).collect();
        for (il, lw) in self.w.layers.iter().enumerate() {
            let (nh, nkv) = (hp.n_head[il], hp.n_head_kv[il]);
            let (dk, dv) = (hp.head_dim_k, hp.head_dim_v);
            let rope = &ropes[il];
            let cs = &tables
                .iter()
                .find(|(r, _)| *r == rope)
                .expect("table built above")
                .1;
            let pool = kv.layer_pool(il);

            // Attention: Q of every row, K and V stored in the cache chunk by chunk.
            let mut q = vec![0f32; n_tokens * nh * dk];
            let mut kq_scale = 1.0;
            for r0 in (0..n_tokens).step_by(ROW_CHUNK) {
                let r1 = (r0 + ROW_CHUNK).min(n_tokens);
                let mut h = vec![0f32; (r1 - r0) * n_embd];
                rms_norm(&x[r0 * n_embd..r1 * n_embd], &lw.attn_norm, hp.rms_eps, &mut h);
                let [qc, mut k, v] = self.project_many(
                    [
                        (&lw.wq, lw.bq.as_ref()),
                        (&lw.wk, lw.bk.as_ref()),
                        (&lw.wv, lw.bv.as_ref()),
                    ],
                    &mut Activations::new(&h, n_embd),
                );
                let qc_dst = &mut q[r0 * nh * dk..r1 * nh * dk];
                qc_dst.copy_from_slice(&qc);
                if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                    rms_norm_inplace(qc_dst, qn, hp.rms_eps);
                    rms_norm_inplace(&mut k, kn, hp.rms_eps);
                }
                for t in r0..r1 {
                    let c = &cs[t * rope.n_rot..(t + 1) * rope.n_rot];
                    let i = t - r0;
                    rope.apply(&mut qc_dst[i * nh * dk..(i + 1) * nh * dk], dk, c);
                    rope.apply(&mut k[i * nkv * dk..(i + 1) * nkv * dk], dk, c);
                }
                kq_scale = match self.arch.q_scale {
                    QScale::InSoftmax => hp.attention_scale(),
                    QScale::PreScaleQ => {
                        let s = hp.attention_scale();
                        qc_dst.iter_mut().for_each(|v| *v *= s);
                        1.0
                    }
                };
                let rows_kv = k.chunks_exact(nkv * dk).zip(v.chunks_exact(nkv * dv));
                for (&cell, (kr, vr)) in cells[pool][r0..r1].iter().zip(rows_kv) {
                    kv.store(il, cell, kr, vr);
                }
            }
            if il == last {
                // Only the rows that produce outputs go on.
                rows = ub.outputs.to_vec();
                x = select_rows(&x, n_embd, &rows);
                if rows.is_empty() {
                    return Vec::new();
                }
            }
            let shape = AttnShape {
                n_head: nh,
                n_kv_head: nkv,
                head_dim_k: dk,
                head_dim_v: dv,
                kq_scale,
                softcap: hp.attn_softcap,
            };
            let cache = kv.view(il);
            let visible = &visible[pool];
            let mut attn = vec![0f32; rows.len() * nh * dv];
            let dst = OutPtr(attn.as_mut_ptr());
            // Tasks: (tile of rows, KV head) for a batch; for a decode step, one per query head,
            // so that its heads still spread over the threads.
            let group = nh / nkv;
            let (tile_rows, head_step) = if rows.len() == 1 {
                (1, 1)
            } else {
                (TILE_ROWS, group)
            };
            let n_tiles = rows.len().div_ceil(tile_rows);
            let per_tile = nh / head_step;
            threads::with_current(|tp| {
                tp.for_each_chunk(n_tiles * per_tile, 1, |items| {
                    SCRATCH.with(|scratch| {
                        let scratch = &mut scratch.borrow_mut();
                        for i in items {
                            let (tile, h0) = (i / per_tile, i % per_tile * head_step);
                            let r0 = tile * tile_rows;
                            let tile = &rows[r0..(r0 + tile_rows).min(rows.len())];
                            let qs: Vec<&[f32]> =
                                tile.iter().map(|&t| &q[t * nh * dk..(t + 1) * nh * dk]).collect();
                            let cells: Vec<&[u32]> = tile.iter().map(|&t| visible[t].as_slice()).collect();
                            attend_tile(&qs, cache, &cells, &shape, h0..h0 + head_step, scratch, |r, h| {
                                // SAFETY: (row r0 + r, head h) is written by this task alone,
                                // in bounds of `attn`, which outlives the step.
                                unsafe {
                                    std::slice::from_raw_parts_mut(
                                        dst.get().add(((r0 + r) * nh + h) * dv),
                                        dv,
                                    )
                                }
                            });
                        }
                    })
                })
            });
            drop(q);

            // Output projection and feed-forward, row-wise: chunk by chunk.
            let n_rows = rows.len();
            for r0 in (0..n_rows).step_by(ROW_CHUNK) {
                let r1 = (r0 + ROW_CHUNK).min(n_rows);
                let xc = &mut x[r0 * n_embd..r1 * n_embd];
                let mut o = self.project(
                    &lw.wo,
                    &mut Activations::new(&attn[r0 * nh * dv..r1 * nh * dv], nh * dv),
                    lw.bo.as_ref(),
                );
                if let Some(w) = &lw.post_attn_norm {
                    rms_norm_inplace(&mut o, w, hp.rms_eps);
                }
                xc.iter_mut().zip(&o).for_each(|(a, b)| *a += b);

                let mut h = o;
                rms_norm(xc, &lw.ffn_norm, hp.rms_eps, &mut h);
                let [mut gate, up] = self.project_many(
                    [
                        (&lw.ffn_gate, lw.ffn_gate_b.as_ref()),
                        (&lw.ffn_up, lw.ffn_up_b.as_ref()),
                    ],
                    &mut Activations::new(&h, n_embd),
                );
                match self.arch.ffn {
                    Ffn::SiluGated | Ffn::SiluFusedUp => act::swiglu(&mut gate, &up),
                    Ffn::GeluGated => act::geglu(&mut gate, &up),
                }
                drop(up);
                let mut down = self.project(
                    &lw.ffn_down,
                    &mut Activations::new(&gate, hp.n_ff[il]),
                    lw.ffn_down_b.as_ref(),
                );
                if let Some(w) = &lw.post_ffn_norm {
                    rms_norm_inplace(&mut down, w, hp.rms_eps);
                }
                xc.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
            }
        }
        rms_norm_inplace(&mut x, &self.w.output_norm, hp.rms_eps);
        x
    }

    /// Logits of final hidden states `x` (rows of `n_embd`), `n_vocab` per row.
    pub(crate) fn logits(&self, x: &[f32]) -> Vec<f32> {
        let mut out = self.project(
            &self.w.output,
            &mut Activations::new(x, self.hp.n_embd),
            self.w.output_b.as_ref(),
        );
        let c = self.hp.final_softcap;
        if c > 0.0 {
            out.iter_mut().for_each(|v| *v = c * (*v / c).tanh());
        }
        out
    }
}
