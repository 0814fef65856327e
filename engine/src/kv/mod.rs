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

/// One layer's keys and values, head-major: KV head `h` of cell `c` at `(h * cells + c) * head`
/// bytes, so that attention, which takes one KV head at a time, reads a contiguous run.
struct LayerKv {
    pool: usize,
    k: Vec<u8>,
    v: Vec<u8>,
    /// Values in one head's keys (values) of one cell, and their bytes.
    head_dim_k: usize,
    head_dim_v: usize,
    k_head: usize,
    v_head: usize,
    n_kv_head: usize,
    cells: usize,
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

/// One layer's keys or values: `n_heads` rows of `row_bytes` per cell, zeroed. The size comes
/// from a request (`num_ctx`, a benchmark's depth) and a model file, so too much is an error,
/// not an abort. Zeroed allocations are mapped lazily: memory is touched only as cells fill.
fn zeroed(n_heads: usize, row_bytes: usize, cells: usize) -> Result<Vec<u8>> {
    let too_big = |n: String| {
        Error::InvalidArgument(format!(
            "a KV cache of {cells} cells needs {n} bytes per layer, more than this machine can give; lower the context size"
        ))
    };
    let n = n_heads
        .checked_mul(row_bytes)
        .and_then(|b| b.checked_mul(cells))
        .ok_or_else(|| too_big("more than 2^64".into()))?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(n).map_err(|_| too_big(n.to_string()))?;
    // SAFETY: `layout` has a non-zero size. A non-null result is `n` zeroed bytes from the
    // global allocator with `u8`'s layout, which is what `Vec::from_raw_parts` takes for a
    // vector of length and capacity `n`.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout);
        if p.is_null() {
            return Err(too_big(n.to_string()));
        }
        Ok(Vec::from_raw_parts(p, n, n))
    }
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
        let cells = |n: usize, w: Option<u32>| {
            Cells::new(n, w).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "a KV cache of {n} cells needs more memory than this machine can give; lower the context size"
                ))
            })
        };
        let mut pools = vec![cells(n_ctx, None)?];
        if let Some(w) = n_swa.filter(|_| layers.iter().any(|l| l.swa)) {
            pools.push(cells(swa_pool_size(n_ctx, w as usize, n_seq, n_batch), Some(w))?);
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
                // Shapes come from a model file: checked, never divided by blindly.
                if l.head_dim_k == 0
                    || l.head_dim_v == 0
                    || !l.n_embd_k.is_multiple_of(l.head_dim_k)
                    || l.n_embd_k / l.head_dim_k * l.head_dim_v != l.n_embd_v
                {
                    return Err(Error::InvalidArgument(format!(
                        "a KV cache for {} keys in heads of {} and {} values in heads of {}",
                        l.n_embd_k, l.head_dim_k, l.n_embd_v, l.head_dim_v
                    )));
                }
                let (k_head, v_head) = (rb(l.head_dim_k)?, rb(l.head_dim_v)?);
                let n_kv_head = l.n_embd_k / l.head_dim_k;
                let pool = usize::from(l.swa && pools.len() > 1);
                let cells = pools[pool].size();
                Ok(LayerKv {
                    pool,
                    k: zeroed(n_kv_head, k_head, cells)?,
                    v: zeroed(n_kv_head, v_head, cells)?,
                    head_dim_k: l.head_dim_k,
                    head_dim_v: l.head_dim_v,
                    k_head,
                    v_head,
                    n_kv_head,
                    cells,
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
            let moves = self.pools[i].make_room(tokens);
            self.move_cells(i, &moves);
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

    /// Moves the keys and values of cells of pool `pool` in every layer of it, as
    /// [`Cells::make_room`] moved the cells (in its order: each `to` is below its `from`).
    fn move_cells(&mut self, pool: usize, moves: &[(u32, u32)]) {
        if moves.is_empty() {
            return;
        }
        for l in self.layers.iter_mut().filter(|l| l.pool == pool) {
            for h in 0..l.n_kv_head {
                for &(from, to) in moves {
                    let (from, to) = (h * l.cells + from as usize, h * l.cells + to as usize);
                    l.k.copy_within(from * l.k_head..(from + 1) * l.k_head, to * l.k_head);
                    l.v.copy_within(from * l.v_head..(from + 1) * l.v_head, to * l.v_head);
                }
            }
        }
    }

    /// Stores the keys and values of one token (f32, all KV heads) in `cell` of layer `il`.
    pub fn store(&mut self, il: usize, cell: u32, k: &[f32], v: &[f32]) {
        let ty = self.ty.ggml_type();
        let l = &mut self.layers[il];
        let c = cell as usize;
        let (hk, hv) = (l.head_dim_k, l.head_dim_v);
        assert!(
            k.len() == l.n_kv_head * hk && v.len() == l.n_kv_head * hv,
            "kv: one token's keys and values"
        );
        for h in 0..l.n_kv_head {
            let (ko, vo) = ((h * l.cells + c) * l.k_head, (h * l.cells + c) * l.v_head);
            quantize_row(ty, &k[h * hk..(h + 1) * hk], &mut l.k[ko..ko + l.k_head]);
            quantize_row(ty, &v[h * hv..(h + 1) * hv], &mut l.v[vo..vo + l.v_head]);
        }
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
    /// pool, each with its own RoPE (`rope_of(il)`).
    pub fn shift_keys(&mut self, pool: usize, cells: &[u32], delta: Pos, rope_of: impl Fn(usize) -> Rope) {
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
            let head_dim = l.head_dim_k;
            let mut row = vec![0f32; head_dim];
            for h in 0..l.n_kv_head {
                for &c in cells {
                    let at = (h * l.cells + c as usize) * l.k_head;
                    let bytes = &mut l.k[at..at + l.k_head];
                    dequantize_row(ty, bytes, &mut row);
                    rope.apply(&mut row, head_dim, &cs);
                    quantize_row(ty, &row, bytes);
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_without_whole_heads_are_refused() {
        let shape = |n_embd_k, head_dim_k, n_embd_v, head_dim_v| LayerShape {
            n_embd_k,
            n_embd_v,
            head_dim_k,
            head_dim_v,
            swa: false,
        };
        for bad in [
            shape(0, 0, 0, 0),
            shape(64, 32, 64, 0),
            shape(96, 64, 96, 64),
            shape(64, 32, 96, 32),
        ] {
            let err = KvCache::new(&[bad], None, 16, 1, 2, KvType::F16).err();
            assert!(matches!(err, Some(Error::InvalidArgument(_))), "{bad:?}: {err:?}");
        }
        assert!(KvCache::new(&[shape(64, 32, 128, 64)], None, 16, 1, 2, KvType::F16).is_ok());
    }

    /// A context no machine can hold (a benchmark's depth of 10^8, a `-c` of 4·10^9 and more)
    /// is an error, not an abort on a failed allocation.
    #[test]
    fn a_cache_too_large_is_an_error() {
        let shape = LayerShape {
            n_embd_k: 64,
            n_embd_v: 64,
            head_dim_k: 32,
            head_dim_v: 32,
            swa: false,
        };
        for n_ctx in [usize::MAX / 2, usize::MAX / 64, 1 << 56] {
            let err = KvCache::new(&[shape], None, n_ctx, 1, 2, KvType::F16).err();
            assert!(
                matches!(&err, Some(Error::InvalidArgument(m)) if m.contains("lower the context size")),
                "{n_ctx}: {err:?}"
            );
        }
        assert!(zeroed(usize::MAX, 2, 2).is_err());
        assert!(zeroed(1 << 40, 1 << 20, 1).is_err());
        assert_eq!(zeroed(2, 3, 4).unwrap(), vec![0u8; 24]);
    }

    /// A stored token's heads land head-major, where attention reads them, in both cache types;
    /// a windowed layer's heads are as many cells apart as its smaller pool has.
    #[test]
    fn heads_are_stored_head_major() {
        let (dk, dv, n_kv) = (32, 64, 3);
        let shape = |swa| LayerShape {
            n_embd_k: n_kv * dk,
            n_embd_v: n_kv * dv,
            head_dim_k: dk,
            head_dim_v: dv,
            swa,
        };
        for ty in [KvType::F16, KvType::Q8_0] {
            let mut kv = KvCache::new(&[shape(false), shape(true)], Some(4), 16, 1, 2, ty).unwrap();
            let k: Vec<f32> = (0..n_kv * dk).map(|i| i as f32 / 8.0).collect();
            let v: Vec<f32> = (0..n_kv * dv).map(|i| -(i as f32) / 4.0).collect();
            for (il, cells) in [(0, 16), (1, 6)] {
                assert_eq!(kv.pools()[kv.layer_pool(il)].size(), cells);
                kv.store(il, 5, &k, &v);
                let view = kv.view(il);
                let (kh, vh) = (ty.row_bytes(dk).unwrap(), ty.row_bytes(dv).unwrap());
                assert_eq!(view.k.len(), n_kv * cells * kh);
                // Head h of cell 5 holds the bytes of that head's values in the cache type.
                let bytes = |x: &[f32], n: usize| {
                    let mut b = vec![0u8; n];
                    quantize_row(ty.ggml_type(), x, &mut b);
                    b
                };
                for h in 0..n_kv {
                    let at = (h * cells + 5) * kh;
                    let want = bytes(&k[h * dk..(h + 1) * dk], kh);
                    assert_eq!(view.k[at..at + kh], want, "{ty:?} layer {il} key head {h}");
                    let at = (h * cells + 5) * vh;
                    let want = bytes(&v[h * dv..(h + 1) * dv], vh);
                    assert_eq!(view.v[at..at + vh], want, "{ty:?} layer {il} value head {h}");
                    assert!(want.iter().any(|&b| b != 0));
                }
            }
        }
    }
}
