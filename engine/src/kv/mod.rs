//! The KV cache: per layer, the keys and values of every cell, in F16 (default) or Q8_0.
//!
//! Cells are shared by all sequences of a context (see [`Cells`]). Layers with a sliding window
//! (gemma3's local layers) keep their keys in a separate, smaller pool of cells: such a layer only
//! ever needs the last `sliding_window` positions of each sequence, so its memory does not grow
//! with the context.

mod cells;

pub use cells::{Cells, Pos, SeqId, MAX_SEQ};

use crate::ops::dot::{dequantize_row, quantize_row};
use crate::ops::rope::Rope;
use crate::quant::GgmlType;
use crate::{Error, Result};

/// The element type of the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    #[default]
    F16,
    Q8_0,
}

impl KvType {
    pub fn ggml_type(self) -> GgmlType {
        match self {
            KvType::F16 => GgmlType::F16,
            KvType::Q8_0 => GgmlType::Q8_0,
        }
    }

    /// Parses `f16` or `q8_0` (case-insensitive), the names llama.cpp and Ollama use.
    pub fn from_name(name: &str) -> Option<KvType> {
        match name.to_ascii_lowercase().as_str() {
            "f16" => Some(KvType::F16),
            "q8_0" => Some(KvType::Q8_0),
            _ => None,
        }
    }

    /// Bytes taken by `n` values (`n` must fit the type's blocks).
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        self.ggml_type().row_bytes(n as u64).map(|b| b as usize)
    }
}

/// The shape of one layer's cache.
#[derive(Clone, Copy, Debug)]
pub struct LayerShape {
    /// Keys per cell: KV heads × key head size.
    pub n_embd_k: usize,
    pub n_embd_v: usize,
    /// Head sizes: a quantized cache needs whole blocks per head.
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// Whether the layer attends through a sliding window.
    pub swa: bool,
}

struct LayerKv {
    pool: usize,
    k: Vec<u8>,
    v: Vec<u8>,
    k_row: usize,
    v_row: usize,
}

pub struct KvCache {
    ty: KvType,
    /// `pools[0]` serves the full-attention layers, `pools[1]` (if any) the windowed ones.
    pools: Vec<Cells>,
    layers: Vec<LayerKv>,
}

/// Cells of the windowed pool for `n_seq` sequences and batches of `n_batch` tokens, never more
/// than the full pool (llama.cpp's `size_swa`).
pub fn swa_pool_size(n_ctx: usize, n_swa: usize, n_seq: usize, n_batch: usize) -> usize {
    n_ctx.min(n_swa.saturating_mul(n_seq).saturating_add(n_batch))
}

impl KvCache {
    /// A cache of `n_ctx` cells for full-attention layers and, if any layer is windowed,
    /// `swa_pool_size(..)` cells for those.
    pub fn new(
        layers: &[LayerShape],
        n_swa: Option<u32>,
        n_ctx: usize,
        n_seq: usize,
        n_batch: usize,
        ty: KvType,
    ) -> Result<KvCache> {
        let mut pools = vec![Cells::new(n_ctx, None)];
        if let Some(w) = n_swa.filter(|_| layers.iter().any(|l| l.swa)) {
            pools.push(Cells::new(
                swa_pool_size(n_ctx, w as usize, n_seq, n_batch),
                Some(w),
            ));
        }
        let layers = layers
            .iter()
            .map(|l| {
                let rb = |n: usize| {
                    ty.row_bytes(n).ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "a KV cache of type {:?} needs head sizes that are multiples of {}",
                            ty,
                            ty.ggml_type().block_size()
                        ))
                    })
                };
                rb(l.head_dim_k)?;
                rb(l.head_dim_v)?;
                let (k_row, v_row) = (rb(l.n_embd_k)?, rb(l.n_embd_v)?);
                let pool = usize::from(l.swa && pools.len() > 1);
                let cells = pools[pool].size();
                // Zeroed allocations are mapped lazily: memory is touched only as cells fill.
                Ok(LayerKv {
                    pool,
                    k: vec![0u8; k_row * cells],
                    v: vec![0u8; v_row * cells],
                    k_row,
                    v_row,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache { ty, pools, layers })
    }

    pub fn ty(&self) -> KvType {
        self.ty
    }

    pub fn pools(&self) -> &[Cells] {
        &self.pools
    }

    /// Which pool layer `il` uses.
    pub fn layer_pool(&self, il: usize) -> usize {
        self.layers[il].pool
    }

    /// Bytes of keys and values held (allocated, not necessarily touched).
    pub fn size_bytes(&self) -> usize {
        self.layers.iter().map(|l| l.k.len() + l.v.len()).sum()
    }

    /// Takes cells in every pool for the tokens `(seq, pos)`; returns, per pool, the cell of each
    /// token. On failure nothing is taken.
    pub fn allocate(&mut self, tokens: &[(SeqId, Pos)]) -> Result<Vec<Vec<u32>>> {
        let mut out: Vec<Vec<u32>> = Vec::with_capacity(self.pools.len());
        for i in 0..self.pools.len() {
            match self.pools[i].allocate(tokens) {
                Ok(c) => out.push(c),
                Err(e) => {
                    for (pool, cells) in self.pools.iter_mut().zip(&out) {
                        for (&c, &(seq, pos)) in cells.iter().zip(tokens) {
                            if pool.pos(c as usize) == Some(pos) {
                                pool.seq_rm(Some(seq), pos, pos + 1);
                            }
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Stores the keys and values of one token (f32, all KV heads) in `cell` of layer `il`.
    pub fn store(&mut self, il: usize, cell: u32, k: &[f32], v: &[f32]) {
        let ty = self.ty.ggml_type();
        let l = &mut self.layers[il];
        let c = cell as usize;
        quantize_row(ty, k, &mut l.k[c * l.k_row..(c + 1) * l.k_row]);
        quantize_row(ty, v, &mut l.v[c * l.v_row..(c + 1) * l.v_row]);
    }

    /// Layer `il`'s keys and values for attention.
    pub fn view(&self, il: usize) -> crate::ops::attention::KvView<'_> {
        let l = &self.layers[il];
        crate::ops::attention::KvView {
            ty: self.ty.ggml_type(),
            k: &l.k,
            v: &l.v,
        }
    }

    /// Rotates the keys of `cells` in pool `pool` by `delta` positions, in every layer of that
    /// pool, each with its own RoPE (`rope_of(il)`, `head_dim_of(il)`).
    pub fn shift_keys(
        &mut self,
        pool: usize,
        cells: &[u32],
        delta: Pos,
        rope_of: impl Fn(usize) -> Rope,
        head_dim_of: impl Fn(usize) -> usize,
    ) {
        if cells.is_empty() || delta == 0 {
            return;
        }
        let ty = self.ty.ggml_type();
        for (il, l) in self.layers.iter_mut().enumerate() {
            if l.pool != pool {
                continue;
            }
            let rope = rope_of(il).for_shift();
            let mut cs = vec![0f32; rope.n_rot];
            rope.cos_sin(delta as f32, &mut cs);
            let n_embd_k = l.k_row / ty.type_size() as usize * ty.block_size() as usize;
            let mut row = vec![0f32; n_embd_k];
            for &c in cells {
                let bytes = &mut l.k[c as usize * l.k_row..(c as usize + 1) * l.k_row];
                dequantize_row(ty, bytes, &mut row);
                rope.apply(&mut row, head_dim_of(il), &cs);
                quantize_row(ty, &row, bytes);
            }
        }
    }

    pub fn seq_rm(&mut self, seq: Option<SeqId>, p0: Pos, p1: Pos) {
        self.pools.iter_mut().for_each(|p| p.seq_rm(seq, p0, p1));
    }

    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        self.pools.iter_mut().for_each(|p| p.seq_cp(src, dst, p0, p1));
    }

    /// Shifts positions; returns per pool the cells whose keys must be rotated by `delta`.
    pub fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) -> Vec<Vec<u32>> {
        self.pools
            .iter_mut()
            .map(|p| p.seq_add(seq, p0, p1, delta))
            .collect()
    }

    /// The last position of `seq` (from the full pool, which holds every position).
    pub fn seq_pos_max(&self, seq: SeqId) -> Option<Pos> {
        self.pools[0].seq_pos_max(seq)
    }

    /// The first position of `seq` that every layer still holds (a windowed pool forgets old
    /// positions, so re-evaluating from before this point means starting the sequence over).
    pub fn seq_pos_min(&self, seq: SeqId) -> Option<Pos> {
        self.pools.iter().filter_map(|p| p.seq_pos_min(seq)).max()
    }

    pub fn clear(&mut self) {
        self.pools.iter_mut().for_each(Cells::clear);
    }
}
