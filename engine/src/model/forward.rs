//! The shared transformer forward pass, driven by an architecture's [`Arch`] description.
//!
//! One call evaluates a micro-batch of tokens (from any number of sequences) through every layer:
//! the keys and values of all its tokens are stored in the KV cache first, then each token attends
//! to the cells its sequence may see (causal, and windowed on sliding-window layers). Only the rows
//! whose outputs are wanted go through the last layer's attention, FFN and the final norm.
//! The row-wise steps (norms, projections, FFN) take the micro-batch in chunks of [`ROW_CHUNK`]
//! rows: a 512-token prompt then needs a few MiB of work buffers, not tens.

use std::cell::RefCell;
use std::ops::Range;

use super::arch::{Ffn, QScale};
use super::pack;
use super::weights::Weight;
use super::Model;
use crate::kernels::Isa;
use crate::kv::{KvCache, Pos, SeqId};
use crate::ops::attention::{
    attend_tile, can_split, split_dims, split_len, split_maxima_len, split_part, split_scores, split_sums,
    tile_rows, AttnShape, KvView, TileScratch, Visible,
};
use crate::ops::matmul::{matmul_many, ROWS_PER_TASK};
use crate::ops::norm::{rms_norm, rms_norm_inplace};
use crate::ops::rope::Rope;
use crate::ops::{act, matmul, Activations, WeightView};
use crate::threads;
use crate::TokenId;

/// Rows that go through the row-wise steps (norms, projections, FFN) together. A long batch is
/// taken in chunks of this many rows, so the step buffers (the FFN's are `n_ff` wide) stay small
/// whatever the batch size; a layer's weights stay in cache from one chunk to the next. Only the
/// residual stream, the queries and the attention output span the whole batch. 128 rather than
/// 64 halves the parallel steps (and their waits) of a long batch, and each unpacked K-quant
/// tile serves twice the tokens: pp512 with 2 threads, alternated with 64, TinyLlama-1.1B-shaped
/// Q6_K 198.6 / 188.7 / 226.9 / 195.3 -> 223.3 / 231.3 / 237.5 / 222.9 t/s, Q4_K_M 218.4 / 210.7
/// -> 232.0 / 220.1, Q4_0 246.0 / 236.5 -> 239.6 / 252.3, Gemma 3 270M 1209 -> 1375. The chunk
/// buffers double (TinyLlama's gate and up: 2.75 MiB more); Gemma's peak RSS grew by 1.6 MiB.
pub(crate) const ROW_CHUNK: usize = 128;

thread_local! {
    static SCRATCH: RefCell<TileScratch> = RefCell::new(TileScratch::default());
}

/// A buffer the tasks of one parallel step write, each its own part of it (the attention output:
/// each (row, head) by one task).
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint parts, and the step ends before the buffer's borrow does.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Rows of a buffer that the tasks of one row-wise step each update in place, each row by the
/// one task that owns its index; the buffer stays borrowed while this lives.
struct SharedRows<'a> {
    ptr: *mut f32,
    width: usize,
    rows: usize,
    _buf: std::marker::PhantomData<&'a mut [f32]>,
}
// SAFETY: tasks reach the buffer only through `row`, whose contract gives each row to one task.
unsafe impl Send for SharedRows<'_> {}
unsafe impl Sync for SharedRows<'_> {}

impl<'a> SharedRows<'a> {
    fn new(buf: &'a mut [f32], width: usize) -> Self {
        assert!(buf.len().is_multiple_of(width));
        SharedRows {
            ptr: buf.as_mut_ptr(),
            width,
            rows: buf.len() / width,
            _buf: std::marker::PhantomData,
        }
    }

    /// Row `t`.
    ///
    /// # Safety
    /// No other reference to row `t` may be alive while the returned one is (in a row-wise step:
    /// only the task given index `t` calls this with `t`, once).
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, t: usize) -> &mut [f32] {
        assert!(t < self.rows);
        std::slice::from_raw_parts_mut(self.ptr.add(t * self.width), self.width)
    }
}

/// Runs `f(i)` for every row `i` of `0..n`, spread over the current pool in tasks of a few rows
/// (on the calling thread alone for a decode step's single row).
fn for_each_row(n: usize, f: impl Fn(usize) + Sync) {
    threads::with_current(|pool| pool.for_each_chunk(n, ROWS_PER_TASK, |r| r.for_each(&f)));
}

/// Runs `f(i, scratch)` for every attention task `i` of `0..n`, spread over the current pool a
/// task at a time, with the running thread's attention buffers.
fn for_each_attention_task(n: usize, f: impl Fn(usize, &mut TileScratch) + Sync) {
    threads::with_current(|tp| {
        tp.for_each_chunk(n, 1, |items| {
            SCRATCH.with(|scratch| {
                let scratch = &mut scratch.borrow_mut();
                for i in items {
                    f(i, scratch);
                }
            })
        })
    });
}

/// The work buffers of the row-wise steps, for one chunk of at most [`ROW_CHUNK`] rows, made
/// once per pass (sized for the widest layer) and reused by every chunk of every layer.
struct ChunkBufs {
    h: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
}

impl ChunkBufs {
    fn new(model: &Model, n_tokens: usize) -> Self {
        let hp = &model.hp;
        let rows = n_tokens.min(ROW_CHUNK);
        let n_kv = hp.n_head_kv.iter().copied().max().unwrap_or(0);
        let n_ff = hp.n_ff.iter().copied().max().unwrap_or(0);
        ChunkBufs {
            h: vec![0f32; rows * hp.n_embd],
            k: vec![0f32; rows * n_kv * hp.head_dim_k],
            v: vec![0f32; rows * n_kv * hp.head_dim_v],
            o: vec![0f32; rows * hp.n_embd],
            gate: vec![0f32; rows * n_ff],
            up: vec![0f32; rows * n_ff],
            down: vec![0f32; rows * hp.n_embd],
        }
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

/// The attention tiles of `rows` (indices into the micro-batch, whose sequences `seq` gives):
/// runs of at most `max_rows` rows ([`tile_rows`]) of one sequence, as ranges of `rows`. Rows of
/// different sequences see different cells, and a tile computes every row's scores over every
/// cell any of its rows sees: a decode step of several sequences in one tile did that many times
/// the work.
fn seq_tiles(rows: &[usize], seq: &[SeqId], max_rows: usize) -> Vec<Range<usize>> {
    let mut tiles = Vec::new();
    let mut start = 0;
    for i in 1..=rows.len() {
        if i == rows.len() || i - start == max_rows || seq[rows[i]] != seq[rows[start]] {
            tiles.push(start..i);
            start = i;
        }
    }
    tiles
}

/// Query heads per attention task of a decode step, for `n_kv` KV heads of `group` query heads
/// each: the divisor of `group` whose tasks, `ceil(tasks / n_threads)` rounds of them, take the
/// least time, more tasks on a tie. A task's time is mostly per cell (reading and converting
/// its KV head's keys and values, which its query heads share), so splitting a group adds work
/// that only pays where it fills idle threads: one thread over 4096 cells in cache
/// (`attn_bench`, one KV head, ms for 1 to 8 query heads), heads of 64 0.052, 0.073, 0.079,
/// 0.075, 0.065, 0.069, 0.072, 0.074; of 128 0.086 to 0.137; of 256 0.168, 0.212, 0.223, 0.247,
/// ... 0.294. Hence one head costs 2 here and more heads 3. Gemma 3 270M (one KV head of 4) on
/// 2 threads: 2 tasks of 2 heads (0.212 ms against 0.247 for one task of 4); Qwen2.5's 2 KV
/// heads of 7 stay whole on 4 or 8 threads (one round of 0.072 ms), where a task per head was
/// 4 or 2 rounds of 0.052 ms.
fn decode_head_step(group: usize, n_kv: usize, n_threads: usize) -> usize {
    let cost = |step: usize| if step == 1 { 2 } else { 3 };
    let time = |step: usize| (n_kv * (group / step)).div_ceil(n_threads.max(1)) * cost(step);
    (1..=group)
        .filter(|&step| group.is_multiple_of(step))
        .min_by_key(|&step| time(step))
        .unwrap_or(1)
}

/// Fewest cells a decode row sees for its attention to go through [`split_decode_attention`]:
/// below, the second parallel step costs about what the rows it saves converting do. Gemma 3
/// 270M on 2 threads, split against not, token by token alternated (1000 steps; each figure
/// with the two orders of alternation, which bias it by up to 3%): with this bound (only its
/// global layers split) 1.004 / 1.010 after 1024 tokens, 1.012 / 1.017 after 2048, 1.052 /
/// 1.046 after 4096, 1.114 / 1.117 after 16384 (400 steps); with 256 (its 512-cell windowed
/// layers too) 1.067 / 1.041 after 4096, against 1.065 / 1.055 with this bound in the same
/// minutes.
const SPLIT_MIN_CELLS: usize = 1024;
/// Most scores (f32) per row and KV head a split decode step keeps between its steps (4 MiB;
/// Gemma 3's 4 heads take 8 query lanes, 2 KiB per block of cells: 128k cells). Longer rows
/// take the plain head split.
const SPLIT_MAX_SCORES: usize = 1 << 20;

/// Decode attention of `rows` (one row per tile) whose KV heads' query heads would split into
/// `parts` tasks each, in two parallel steps: each part takes every query head's scores over its
/// part of the cells ([`split_scores`]), then every head's weights and weighted sums of its part
/// of the values over all cells ([`split_sums`]). Where each part took some heads over all cells,
/// every part read and converted every key and value row of its KV head: Gemma 3 270M (one KV
/// head of 4 heads of 256) on two threads, one layer at 4096 cells on one thread, 0.195 ms for 2
/// heads against 0.239 for all 4; the split's steps take 0.096-0.100 ms (scores) and 0.042-0.043
/// (sums) per part.
/// `split_s` and `split_m` hold the scores and maxima between the steps; `dst` is the attention
/// output of `rows`.
#[allow(clippy::too_many_arguments)]
fn split_decode_attention(
    q: &[f32],
    rows: &[usize],
    visible: &[Visible],
    cache: KvView,
    shape: &AttnShape,
    parts: usize,
    (split_s, split_m): (&mut Vec<f32>, &mut Vec<f32>),
    dst: OutPtr,
) {
    let (nh, nkv, dk, dv) = (shape.n_head, shape.n_kv_head, shape.head_dim_k, shape.head_dim_v);
    let group = nh / nkv;
    let isa = Isa::active();
    let m_len = split_maxima_len(group);
    // Row j's scores, KV head after KV head, from `starts[j]` (every part of every row's KV head
    // written in the first step before the second reads any: no zeroing).
    let mut starts = Vec::with_capacity(rows.len());
    let mut total = 0;
    for &t in rows {
        starts.push(total);
        total += nkv * split_len(visible[t].cells(), group);
    }
    split_s.resize(total, 0.0);
    // Task i = (row j, KV head, part) in that order writes maxima i.
    let n_tasks = rows.len() * nkv * parts;
    split_m.resize(n_tasks * m_len, 0.0);
    let task = |i: usize| (i / (nkv * parts), i / parts % nkv, i % parts);
    let (s_ptr, m_ptr) = (OutPtr(split_s.as_mut_ptr()), OutPtr(split_m.as_mut_ptr()));
    for_each_attention_task(n_tasks, |i, scratch| {
        let (j, kvh, p) = task(i);
        let (t, cells) = (rows[j], visible[rows[j]]);
        let base = starts[j] + kvh * split_len(cells.cells(), group);
        let at = split_part(cells.cells(), group, p, parts);
        // SAFETY: task i alone writes part p of (row j, KV head kvh)'s scores and
        // maxima i, inside `split_s` (`total`) and `split_m`, which outlive the step.
        let (s, m) = unsafe {
            (
                std::slice::from_raw_parts_mut(s_ptr.get().add(base + at.start), at.len()),
                std::slice::from_raw_parts_mut(m_ptr.get().add(i * m_len), m_len),
            )
        };
        let q = &q[t * nh * dk..(t + 1) * nh * dk];
        split_scores(isa, q, cache, cells, shape, kvh, (p, parts), scratch, s, m);
    });
    let (split_s, split_m) = (&*split_s, &*split_m);
    for_each_attention_task(n_tasks, |i, scratch| {
        let (j, kvh, p) = task(i);
        let cells = visible[rows[j]];
        let len = split_len(cells.cells(), group);
        let s = &split_s[starts[j] + kvh * len..][..len];
        let first = i - p;
        let m = &split_m[first * m_len..(first + parts) * m_len];
        let dims = split_dims(dv, p, parts);
        let (at, width) = (dims.start, dims.len());
        split_sums(isa, cache, cells, shape, kvh, dims, s, m, scratch, |h| {
            // SAFETY: values `dims` of (row j, head h) are written by this task
            // alone, in bounds of the attention output, which outlives the step.
            unsafe { std::slice::from_raw_parts_mut(dst.get().add((j * nh + h) * dv + at), width) }
        });
    });
}

impl Model {
    pub(crate) fn view(&self, w: &Weight) -> WeightView<'_> {
        let t = &self.gguf.tensors()[w.tensor];
        let rows = t.info.dims[1] as usize;
        let data = self
            .packed
            .data(w.tensor)
            .unwrap_or_else(|| self.gguf.tensor_data(t));
        WeightView::new(w.ty, w.n_in, rows, data)
            .expect("shapes were checked at load")
            .with_packed_rows(self.packed.rows(w.tensor))
            .rows(w.row0..w.row0 + w.n_out)
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
        // While the weights are read they move to huge pages only slowly (see `pack::Activity`).
        let _reading = pack::reading();
        let n_embd = hp.n_embd;
        let n_tokens = ub.tokens.len();
        let mut x = self.embed(ub.tokens);

        // The rotation angles of each token, once per distinct RoPE (gemma3 has two), and the
        // table of each layer. Kept by index rather than looked up again by value: a RoPE with
        // a NaN in it (a `rope_freqs` tensor's) equals no RoPE, itself included.
        let mut tables: Vec<(&Rope, Vec<f32>)> = Vec::new();
        let table_of: Vec<usize> = ropes
            .iter()
            .map(|rope| {
                if let Some(i) = tables.iter().position(|(r, _)| *r == rope) {
                    return i;
                }
                let mut cs = vec![0f32; n_tokens * rope.n_rot];
                for (row, &p) in cs.chunks_exact_mut(rope.n_rot).zip(ub.pos) {
                    rope.cos_sin(p as f32, row);
                }
                tables.push((rope, cs));
                tables.len() - 1
            })
            .collect();

        // The cells each token may see, per KV pool: the same in every layer of the pool.
        let lists: Vec<Vec<Vec<u32>>> = kv
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
        // Checked once here, taken as they are by every layer's tiles.
        let visible: Vec<Vec<Visible>> = lists
            .iter()
            .map(|pool| pool.iter().map(|v| Visible::new(v)).collect())
            .collect();

        let last = hp.n_layer - 1;
        let eps = hp.rms_eps;
        let mut bufs = ChunkBufs::new(self, n_tokens);
        // The queries and the attention output span the whole batch. Every layer overwrites
        // them, so they are made once: zeroing 8 MiB per layer of a 512-token TinyLlama batch
        // was 2-3% of pp512 (`perf`: memset and fresh pages).
        let max_head = hp.n_head.iter().copied().max().unwrap_or(0);
        let mut q_all = vec![0f32; n_tokens * max_head * hp.head_dim_k];
        let mut attn_all = vec![0f32; n_tokens * max_head * hp.head_dim_v];
        let mut rows: Vec<usize> = (0..n_tokens).collect();
        // A split decode step's scores and maxima between its two parallel steps.
        let (mut split_s, mut split_m) = (Vec::new(), Vec::new());
        for (il, lw) in self.w.layers.iter().enumerate() {
            let (nh, nkv) = (hp.n_head[il], hp.n_head_kv[il]);
            let (dk, dv) = (hp.head_dim_k, hp.head_dim_v);
            let rope = &ropes[il];
            let cs = &tables[table_of[il]].1;
            let pool = kv.layer_pool(il);

            // Attention: Q of every row, K and V stored in the cache chunk by chunk. Each chunk
            // is three parallel steps: the norm and its conversion for the projections (row by
            // row), Q/K/V, then biases, QK-norm, RoPE and the Q scale (row by row).
            let q = &mut q_all[..n_tokens * nh * dk];
            let (kq_scale, q_scale) = match self.arch.q_scale {
                QScale::InSoftmax => (hp.attention_scale(), None),
                QScale::PreScaleQ => (1.0, Some(hp.attention_scale())),
            };
            let wqkv = [self.view(&lw.wq), self.view(&lw.wk), self.view(&lw.wv)];
            for r0 in (0..n_tokens).step_by(ROW_CHUNK) {
                let r1 = (r0 + ROW_CHUNK).min(n_tokens);
                let m = r1 - r0;
                let xc = &x[r0 * n_embd..r1 * n_embd];
                let mut h = Activations::from_rows(&mut bufs.h[..m * n_embd], n_embd, &wqkv, |i, h| {
                    rms_norm(&xc[i * n_embd..(i + 1) * n_embd], &lw.attn_norm, eps, h)
                });
                let qc = &mut q[r0 * nh * dk..r1 * nh * dk];
                let k = &mut bufs.k[..m * nkv * dk];
                let v = &mut bufs.v[..m * nkv * dv];
                matmul_many(&wqkv, &mut h, &mut [&mut *qc, &mut *k, &mut *v]);
                let (qs, ks, vs) = (
                    SharedRows::new(qc, nh * dk),
                    SharedRows::new(k, nkv * dk),
                    SharedRows::new(v, nkv * dv),
                );
                for_each_row(m, |i| {
                    // SAFETY: row i is this task's alone.
                    let (qr, kr, vr) = unsafe { (qs.row(i), ks.row(i), vs.row(i)) };
                    add_bias(qr, lw.bq.as_ref());
                    add_bias(kr, lw.bk.as_ref());
                    add_bias(vr, lw.bv.as_ref());
                    if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                        rms_norm_inplace(qr, qn, eps);
                        rms_norm_inplace(kr, kn, eps);
                    }
                    let t = r0 + i;
                    let c = &cs[t * rope.n_rot..(t + 1) * rope.n_rot];
                    rope.apply(qr, dk, c);
                    rope.apply(kr, dk, c);
                    if let Some(s) = q_scale {
                        qr.iter_mut().for_each(|v| *v *= s);
                    }
                });
                let (k, v) = (&bufs.k[..m * nkv * dk], &bufs.v[..m * nkv * dv]);
                let rows_kv = k.chunks_exact(nkv * dk).zip(v.chunks_exact(nkv * dv));
                for (&cell, (kr, vr)) in cells[pool][r0..r1].iter().zip(rows_kv) {
                    kv.store(il, cell, kr, vr);
                }
            }
            let q = &*q;
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
            let attn = &mut attn_all[..rows.len() * nh * dv];
            let dst = OutPtr(attn.as_mut_ptr());
            // Tasks: (tile of rows, KV head), so that a KV head's query heads share its K/V
            // rows; where every tile is one row (decode steps), a KV head's query heads may
            // split into parts where that fills idle threads (`decode_head_step`), and then,
            // past a thousand cells, the parts take the scores by cells, then the sums by
            // values instead (`split_decode_attention`).
            let group = nh / nkv;
            let tiles = seq_tiles(&rows, ub.seq, tile_rows(group));
            let n_threads = threads::with_current(|tp| tp.n_threads());
            let head_step = if tiles.len() == rows.len() {
                decode_head_step(group, nkv * tiles.len(), n_threads)
            } else {
                group
            };
            let parts = group / head_step;
            let split = parts > 1
                && can_split(Isa::active(), cache.ty, group, dv, parts)
                && rows.iter().any(|&t| visible[t].cells().len() >= SPLIT_MIN_CELLS)
                && rows
                    .iter()
                    .all(|&t| split_len(visible[t].cells(), group) <= SPLIT_MAX_SCORES);
            if split {
                let bufs = (&mut split_s, &mut split_m);
                split_decode_attention(q, &rows, visible, cache, &shape, parts, bufs, dst);
            } else {
                let per_tile = nh / head_step;
                for_each_attention_task(tiles.len() * per_tile, |i, scratch| {
                    let (tile, h0) = (&tiles[i / per_tile], i % per_tile * head_step);
                    let r0 = tile.start;
                    let tile = &rows[tile.clone()];
                    let qs: Vec<&[f32]> = tile.iter().map(|&t| &q[t * nh * dk..(t + 1) * nh * dk]).collect();
                    let cells: Vec<Visible> = tile.iter().map(|&t| visible[t]).collect();
                    attend_tile(&qs, cache, &cells, &shape, h0..h0 + head_step, scratch, |r, h| {
                        // SAFETY: (row r0 + r, head h) is written by this task alone,
                        // in bounds of `attn`, which outlives the step.
                        unsafe { std::slice::from_raw_parts_mut(dst.get().add(((r0 + r) * nh + h) * dv), dv) }
                    });
                });
            }

            // Output projection and feed-forward, chunk by chunk: each matmul's input made in
            // one row-wise parallel step (residual add, norm and conversion; activation function
            // and conversion), then the last residual add, row by row.
            let n_rows = rows.len();
            let n_ff = hp.n_ff[il];
            let wo = self.view(&lw.wo);
            let wgu = [self.view(&lw.ffn_gate), self.view(&lw.ffn_up)];
            let wd = self.view(&lw.ffn_down);
            for r0 in (0..n_rows).step_by(ROW_CHUNK) {
                let r1 = (r0 + ROW_CHUNK).min(n_rows);
                let m = r1 - r0;
                let o = &mut bufs.o[..m * n_embd];
                matmul(
                    &wo,
                    &mut Activations::new(&attn[r0 * nh * dv..r1 * nh * dv], nh * dv),
                    o,
                );
                let xs = SharedRows::new(&mut x[r0 * n_embd..r1 * n_embd], n_embd);
                let os = SharedRows::new(o, n_embd);
                let mut h = Activations::from_rows(&mut bufs.h[..m * n_embd], n_embd, &wgu, |i, h| {
                    // SAFETY: row i is this task's alone.
                    let (xr, or) = unsafe { (xs.row(i), os.row(i)) };
                    add_bias(or, lw.bo.as_ref());
                    if let Some(w) = &lw.post_attn_norm {
                        rms_norm_inplace(or, w, eps);
                    }
                    xr.iter_mut().zip(&*or).for_each(|(a, b)| *a += b);
                    rms_norm(xr, &lw.ffn_norm, eps, h);
                });
                let gate = &mut bufs.gate[..m * n_ff];
                let up = &mut bufs.up[..m * n_ff];
                matmul_many(&wgu, &mut h, &mut [&mut *gate, &mut *up]);
                let ups = SharedRows::new(up, n_ff);
                let mut g = Activations::from_rows(gate, n_ff, &[wd], |i, g| {
                    // SAFETY: row i is this task's alone.
                    let u = unsafe { ups.row(i) };
                    add_bias(g, lw.ffn_gate_b.as_ref());
                    add_bias(u, lw.ffn_up_b.as_ref());
                    match self.arch.ffn {
                        Ffn::SiluGated | Ffn::SiluFusedUp => act::swiglu(g, u),
                        Ffn::GeluGated => act::geglu(g, u),
                    }
                });
                let down = &mut bufs.down[..m * n_embd];
                matmul(&wd, &mut g, down);
                let ds = SharedRows::new(down, n_embd);
                for_each_row(m, |i| {
                    // SAFETY: row i is this task's alone.
                    let (xr, d) = unsafe { (xs.row(i), ds.row(i)) };
                    add_bias(d, lw.ffn_down_b.as_ref());
                    if let Some(w) = &lw.post_ffn_norm {
                        rms_norm_inplace(d, w, eps);
                    }
                    xr.iter_mut().zip(&*d).for_each(|(a, b)| *a += b);
                });
            }
        }
        rms_norm_inplace(&mut x, &self.w.output_norm, hp.rms_eps);
        x
    }

    /// Logits of final hidden states `x` (rows of `n_embd`) into `out`, `n_vocab` per row. The
    /// caller's buffer, not a fresh one: with a 262k-token vocabulary a fresh one cost a 1 MiB
    /// zeroing and a copy per decoded token.
    pub(crate) fn logits(&self, x: &[f32], out: &mut [f32]) {
        let _reading = pack::reading();
        matmul(
            &self.view(&self.w.output),
            &mut Activations::new(x, self.hp.n_embd),
            out,
        );
        add_bias(out, self.w.output_b.as_ref());
        let c = self.hp.final_softcap;
        if c > 0.0 {
            out.iter_mut().for_each(|v| *v = c * (*v / c).tanh());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{decode_head_step, seq_tiles, Range};
    use crate::ops::attention::TILE_ROWS;

    #[test]
    fn attention_tiles_hold_rows_of_one_sequence() {
        // A prompt: tiles of TILE_ROWS rows and a shorter last one.
        let rows: Vec<usize> = (0..TILE_ROWS * 2 + 3).collect();
        let seq = vec![0; rows.len()];
        assert_eq!(
            seq_tiles(&rows, &seq, TILE_ROWS),
            [0..TILE_ROWS, TILE_ROWS..2 * TILE_ROWS, 2 * TILE_ROWS..rows.len()]
        );
        // A decode step of three sequences: one row each.
        assert_eq!(seq_tiles(&[0, 1, 2], &[2, 0, 1], TILE_ROWS), [0..1, 1..2, 2..3]);
        // Two prompts in one batch, then the output rows of a last layer (indices into the batch).
        assert_eq!(
            seq_tiles(&[0, 1, 2, 3, 4], &[0, 0, 0, 1, 1], TILE_ROWS),
            [0..3, 3..5]
        );
        assert_eq!(seq_tiles(&[0, 1, 2, 3, 4], &[0; 5], 2), [0..2, 2..4, 4..5]);
        assert_eq!(seq_tiles(&[2, 4], &[0, 0, 0, 1, 1], TILE_ROWS), [0..1, 1..2]);
        assert_eq!(seq_tiles(&[], &[], TILE_ROWS), Vec::<Range<usize>>::new());
    }

    #[test]
    fn decode_attention_splits_groups_only_where_it_fills_idle_threads() {
        // (query heads per KV head, KV heads, threads) -> heads per task.
        // Gemma 3 (one KV head of 4).
        assert_eq!(decode_head_step(4, 1, 1), 4);
        assert_eq!(decode_head_step(4, 1, 2), 2);
        assert_eq!(decode_head_step(4, 1, 4), 1);
        assert_eq!(decode_head_step(4, 1, 8), 1);
        // Qwen2.5 0.5B and 7B (2 and 4 KV heads of 7): whole groups until there is a thread for
        // every head.
        assert_eq!(decode_head_step(7, 2, 2), 7);
        assert_eq!(decode_head_step(7, 2, 4), 7);
        assert_eq!(decode_head_step(7, 2, 8), 7);
        assert_eq!(decode_head_step(7, 2, 14), 1);
        assert_eq!(decode_head_step(7, 4, 8), 7);
        assert_eq!(decode_head_step(7, 1, 2), 7);
        // TinyLlama and Llama 3 8B (4 of 8, 8 of 4).
        assert_eq!(decode_head_step(8, 4, 2), 8);
        assert_eq!(decode_head_step(8, 4, 8), 4);
        assert_eq!(decode_head_step(4, 8, 8), 4);
        assert_eq!(decode_head_step(4, 8, 16), 2);
        assert_eq!(decode_head_step(6, 2, 4), 3);
        assert_eq!(decode_head_step(6, 1, 4), 2);
        assert_eq!(decode_head_step(1, 32, 2), 1);
    }
}
