//! A context: the state for running a [`Model`] on one or more sequences (KV cache, thread pool,
//! outputs of the last decode), and the batch API that drives it.

use std::sync::Arc;

use crate::batch::Batch;
use crate::kv::{KvCache, KvType, LayerShape, Pos, SeqId, MAX_SEQ};
use crate::model::forward::Ubatch;
use crate::model::{Model, Pooling};
use crate::ops::rope::Rope;
use crate::threads::ThreadPool;
use crate::{Error, Result};

/// How a context is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextParams {
    /// KV cells, shared by all sequences; each sequence may hold `n_ctx / n_seq_max` of them
    /// (all of them with `kv_unified`).
    pub n_ctx: u32,
    /// Most tokens evaluated in one forward pass; larger batches are split.
    pub n_batch: u32,
    /// Number of sequences (ids `0..n_seq_max`), at most [`MAX_SEQ`].
    pub n_seq_max: u32,
    pub kv_type: KvType,
    /// Worker threads; 0 for one per CPU.
    pub n_threads: usize,
    /// Compute pooled embeddings of each sequence in every decoded batch.
    pub embeddings: bool,
    /// Every sequence may hold all `n_ctx` cells (llama.cpp's `kv_unified`), as when a batch of
    /// short sequences and a long one alone take turns in the same cache.
    pub kv_unified: bool,
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            n_ctx: 4096,
            n_batch: 512,
            n_seq_max: 1,
            kv_type: KvType::F16,
            n_threads: 0,
            embeddings: false,
            kv_unified: false,
        }
    }
}

impl ContextParams {
    /// Cells one sequence may hold.
    fn seq_cells(&self) -> u32 {
        if self.kv_unified {
            self.n_ctx
        } else {
            self.n_ctx / self.n_seq_max
        }
    }
}

/// Pooled embedding being accumulated for one sequence during a decode.
#[derive(Clone)]
struct Pooled {
    sum: Vec<f64>,
    count: usize,
    first: Option<Vec<f32>>,
    last: Vec<f32>,
}

pub struct Context {
    model: Arc<Model>,
    params: ContextParams,
    kv: KvCache,
    ropes: Vec<Rope>,
    pool: ThreadPool,
    /// For each token of the last decoded batch, the row of `logits` holding its logits.
    output_row: Vec<Option<usize>>,
    logits: Vec<f32>,
    /// Pooled embedding of each sequence in the last decoded batch.
    embeddings: Vec<Option<Vec<f32>>>,
}

impl Context {
    pub fn new(model: Arc<Model>, params: ContextParams) -> Result<Context> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if params.n_ctx == 0 || params.n_batch == 0 {
            return bad("n_ctx and n_batch must be positive".into());
        }
        if params.n_seq_max == 0 || params.n_seq_max > MAX_SEQ {
            return bad(format!("n_seq_max must be in 1..={MAX_SEQ}"));
        }
        if params.n_ctx < params.n_seq_max {
            return bad(format!(
                "n_ctx {} is smaller than n_seq_max {}",
                params.n_ctx, params.n_seq_max
            ));
        }
        let hp = model.hparams();
        let shapes: Vec<LayerShape> = (0..hp.n_layer)
            .map(|il| LayerShape {
                n_embd_k: hp.n_embd_k_gqa(il),
                n_embd_v: hp.n_embd_v_gqa(il),
                head_dim_k: hp.head_dim_k,
                head_dim_v: hp.head_dim_v,
                swa: hp.swa_layers[il],
            })
            .collect();
        let n_batch = params.n_batch.min(params.n_ctx);
        let kv = KvCache::new(
            &shapes,
            hp.n_swa,
            params.n_ctx as usize,
            params.n_seq_max as usize,
            n_batch as usize,
            params.kv_type,
        )?;
        let ropes = model.layer_ropes(params.seq_cells());
        let pool = ThreadPool::new(params.n_threads)
            .map_err(|e| Error::InvalidArgument(format!("cannot start worker threads: {e}")))?;
        Ok(Context {
            embeddings: vec![None; params.n_seq_max as usize],
            params: ContextParams { n_batch, ..params },
            model,
            kv,
            ropes,
            pool,
            output_row: Vec::new(),
            logits: Vec::new(),
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    pub fn n_ctx(&self) -> u32 {
        self.params.n_ctx
    }

    /// Cells one sequence may hold.
    pub fn n_ctx_seq(&self) -> u32 {
        self.params.seq_cells()
    }

    pub fn n_batch(&self) -> u32 {
        self.params.n_batch
    }

    /// Bytes allocated for the KV cache.
    pub fn kv_size_bytes(&self) -> usize {
        self.kv.size_bytes()
    }

    /// Evaluates a batch: stores its keys and values and computes the logits (and embeddings)
    /// asked for. Each sequence's tokens must have consecutive positions continuing from the
    /// sequence's last position. On an error nothing of the batch is kept if the problem was
    /// found up front (bad input, no room); if a later micro-batch fails, the sequences hold the
    /// tokens evaluated before it.
    pub fn decode(&mut self, batch: &Batch) -> Result<()> {
        self.check(batch)?;
        let n = batch.len();
        let n_vocab = self.model.n_vocab();
        let n_embd = self.model.n_embd();
        self.output_row = vec![None; n];
        // Sized once for every row asked for, and overwritten in place: a decode step of one
        // token reuses last step's buffer as it is.
        let n_logits = (0..n).filter(|&i| batch.wants_logits(i)).count();
        self.logits.resize(n_logits * n_vocab, 0.0);
        let mut filled = 0;
        self.embeddings.iter_mut().for_each(|e| *e = None);
        let mut pooled: Vec<Option<Pooled>> = vec![None; self.params.n_seq_max as usize];
        let n_batch = self.params.n_batch as usize;
        let mut start = 0;
        while start < n {
            let end = (start + n_batch).min(n);
            let tokens = &batch.tokens()[start..end];
            let pos = &batch.positions()[start..end];
            let seq = &batch.seqs()[start..end];
            let wants: Vec<usize> = (start..end)
                .filter(|&i| batch.wants_logits(i))
                .map(|i| i - start)
                .collect();
            let outputs: Vec<usize> = if self.params.embeddings {
                (0..end - start).collect()
            } else {
                wants.clone()
            };
            let pairs: Vec<(SeqId, Pos)> = seq.iter().copied().zip(pos.iter().copied()).collect();
            let cells = self.kv.allocate(&pairs)?;
            let ub = Ubatch {
                tokens,
                pos,
                seq,
                outputs: &outputs,
            };
            let (model, kv, ropes) = (&self.model, &mut self.kv, &self.ropes);
            let hidden = self.pool.install(|| model.forward(&ub, kv, &cells, ropes));
            if !wants.is_empty() {
                let picked: Vec<f32>;
                let rows: &[f32] = if self.params.embeddings {
                    picked = wants
                        .iter()
                        .flat_map(|&r| &hidden[r * n_embd..(r + 1) * n_embd])
                        .copied()
                        .collect();
                    &picked
                } else {
                    &hidden
                };
                let out = &mut self.logits[filled * n_vocab..(filled + wants.len()) * n_vocab];
                self.pool.install(|| model.logits(rows, out));
                for (k, &r) in wants.iter().enumerate() {
                    self.output_row[start + r] = Some(filled + k);
                }
                filled += wants.len();
            }
            if self.params.embeddings {
                for (r, h) in hidden.chunks_exact(n_embd).enumerate() {
                    let p = pooled[seq[r] as usize].get_or_insert_with(|| Pooled {
                        sum: vec![0.0; n_embd],
                        count: 0,
                        first: None,
                        last: Vec::new(),
                    });
                    p.sum.iter_mut().zip(h).for_each(|(s, v)| *s += f64::from(*v));
                    p.count += 1;
                    if p.first.is_none() {
                        p.first = Some(h.to_vec());
                    }
                    p.last = h.to_vec();
                }
            }
            start = end;
        }
        let pooling = self.model.pooling();
        for (s, p) in pooled.into_iter().enumerate() {
            if let Some(p) = p {
                let e = match pooling {
                    Pooling::Mean => p.sum.iter().map(|v| (v / p.count as f64) as f32).collect(),
                    Pooling::Cls => p.first.unwrap_or_default(),
                    Pooling::Last => p.last,
                };
                self.embeddings[s] = Some(e);
            }
        }
        Ok(())
    }

    /// Validates a batch before anything is changed.
    fn check(&self, batch: &Batch) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if batch.is_empty() {
            return bad("empty batch".into());
        }
        let n_vocab = self.model.n_vocab();
        let n_seq = self.params.n_seq_max as usize;
        let mut next: Vec<Option<Pos>> = (0..n_seq as SeqId)
            .map(|s| self.kv.seq_pos_max(s).map(|p| p + 1))
            .collect();
        let mut added = vec![0usize; n_seq];
        for i in 0..batch.len() {
            let (tok, pos, seq) = (batch.tokens()[i], batch.positions()[i], batch.seqs()[i]);
            if tok as usize >= n_vocab {
                return bad(format!(
                    "token {tok} at index {i} is outside the vocabulary of {n_vocab}"
                ));
            }
            if seq as usize >= n_seq {
                return bad(format!(
                    "sequence id {seq} at index {i}, the context has {n_seq} sequences"
                ));
            }
            if pos < 0 {
                return bad(format!("negative position {pos} at index {i}"));
            }
            match next[seq as usize] {
                Some(p) if p != pos => {
                    return bad(format!(
                        "sequence {seq}: token {i} has position {pos}, expected {p} (positions must continue the sequence)"
                    ))
                }
                _ => next[seq as usize] = Some(pos + 1),
            }
            added[seq as usize] += 1;
        }
        let limit = self.n_ctx_seq() as usize;
        for (s, &a) in added.iter().enumerate() {
            if a == 0 {
                continue;
            }
            let held = self.kv.pools()[0].seq_count(s as SeqId);
            if held + a > limit {
                return Err(Error::KvCacheFull(format!(
                    "sequence {s} would hold {} tokens, its context is {limit} (remove or shift tokens first)",
                    held + a
                )));
            }
        }
        let free = self.kv.pools()[0].size() - self.kv.pools()[0].used();
        if batch.len() > free {
            return Err(Error::KvCacheFull(format!(
                "{} tokens for {free} free cells",
                batch.len()
            )));
        }
        Ok(())
    }

    /// The logits of token `i` of the last decoded batch, if they were asked for.
    pub fn logits(&self, i: usize) -> Option<&[f32]> {
        let n_vocab = self.model.n_vocab();
        let r = (*self.output_row.get(i)?)?;
        Some(&self.logits[r * n_vocab..(r + 1) * n_vocab])
    }

    /// The pooled embedding of `seq` over its tokens in the last decoded batch, not normalized
    /// (as llama.cpp's `llama_get_embeddings_seq`; `ops::norm::l2_normalize` scales it)
    /// (only with `ContextParams::embeddings`).
    pub fn embeddings(&self, seq: SeqId) -> Option<&[f32]> {
        self.embeddings.get(seq as usize)?.as_deref()
    }

    /// Removes the tokens of `seq` (all sequences if `None`) with positions in `[p0, p1)`;
    /// `p1 < 0` means to the end.
    pub fn seq_rm(&mut self, seq: Option<SeqId>, p0: Pos, p1: Pos) {
        let (p0, p1) = range(p0, p1);
        self.kv.seq_rm(seq, p0, p1);
    }

    /// Makes `dst` share the tokens of `src` in `[p0, p1)` (a prompt prefix is then stored once).
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        let (p0, p1) = range(p0, p1);
        self.kv.seq_cp(src, dst, p0, p1);
    }

    /// Adds `delta` to the positions of `seq`'s tokens in `[p0, p1)`, rotating their cached keys
    /// accordingly (each layer with its own RoPE); tokens moved below 0 are removed.
    pub fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) {
        let (p0, p1) = range(p0, p1);
        let moved = self.kv.seq_add(seq, p0, p1, delta);
        let ropes = &self.ropes;
        let kv = &mut self.kv;
        self.pool.install(|| {
            for (pool, cells) in moved.iter().enumerate() {
                kv.shift_keys(pool, cells, delta, |il| ropes[il].clone());
            }
        });
    }

    /// The last position of `seq`, if it holds any token.
    pub fn seq_pos_max(&self, seq: SeqId) -> Option<Pos> {
        self.kv.seq_pos_max(seq)
    }

    /// The first position of `seq` that every layer still holds (sliding-window layers forget
    /// older ones; re-evaluating from before it means starting the sequence over).
    pub fn seq_pos_min(&self, seq: SeqId) -> Option<Pos> {
        self.kv.seq_pos_min(seq)
    }

    /// Empties the KV cache.
    pub fn clear(&mut self) {
        self.kv.clear();
        self.output_row.clear();
        self.logits.clear();
    }

    /// Makes room for `n_new` more tokens of `seq` by llama.cpp's context shift: while they would
    /// not fit in a context of `n_ctx` (at most the sequence's), keep the first `n_keep`
    /// positions, drop half of the rest and shift the remainder down. Returns the number of
    /// positions dropped.
    pub fn make_room(&mut self, seq: SeqId, n_keep: usize, n_new: usize, n_ctx: usize) -> Result<usize> {
        let n_ctx = n_ctx.min(self.n_ctx_seq() as usize);
        if n_keep + n_new >= n_ctx {
            return Err(Error::InvalidArgument(format!(
                "cannot fit {n_new} new tokens after keeping {n_keep} in a context of {n_ctx}"
            )));
        }
        let mut n_past = self.seq_pos_max(seq).map_or(0, |p| p as usize + 1);
        let mut dropped = 0;
        while n_past + n_new > n_ctx {
            let n_left = n_past.saturating_sub(n_keep);
            let n_discard = (n_left / 2).max(1);
            let (keep, cut, past) = (n_keep as Pos, (n_keep + n_discard) as Pos, n_past as Pos);
            self.seq_rm(Some(seq), keep, cut);
            self.seq_add(seq, cut, past, -(n_discard as Pos));
            n_past -= n_discard;
            dropped += n_discard;
        }
        Ok(dropped)
    }
}

fn range(p0: Pos, p1: Pos) -> (Pos, Pos) {
    (p0.max(0), if p1 < 0 { Pos::MAX } else { p1 })
}
