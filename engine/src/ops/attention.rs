//! Scaled dot-product attention of query rows over the cached keys and values of one layer.
//!
//! The cost per query is linear in the number of visible cells; query heads that share a KV
//! head (GQA) read the same rows. Numerics follow llama.cpp's CPU path: the query is rounded
//! through the cache's dot format (f16 for an F16 cache, Q8_0 blocks for a Q8_0 one), and with
//! an F16 cache the softmax weights are rounded to f16 before weighting V; as in its flash
//! attention, the weighted sum is scaled by the inverse of the weights' sum last. Scores, the
//! softmax and the weighted sums are in f32 with fused multiply-adds in a fixed order per query
//! (see [`crate::kernels::attn`]): the maximum score first (exact), then one chain of additions
//! per query over its cells in ascending order. So a query gives the same bits whatever tile, batch
//! or instruction-set tier computes it, and whichever cells hold its sequence: a request's answer
//! does not change with what other sequences occupy the cache.

use std::ops::Range;

use super::dot::{quantize_row, vec_dot_type};
use crate::kernels::attn::{self as k, LANES};
use crate::kernels::Isa;
use crate::quant::GgmlType;

/// One layer's cache, head-major: `k` (`v`) holds, KV head after KV head, the keys (values) of
/// every cell in `ty`, so head `h` of cell `c` is the `h * n_cells + c`-th head-sized run; the
/// cells a query sees are then one contiguous stretch per KV head.
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

/// Byte sizes of one layer's cache, computed once per call.
#[derive(Clone, Copy)]
struct Rows {
    /// Bytes of one KV head's keys (values) of one cell.
    k_head: usize,
    v_head: usize,
    n_cells: usize,
}

impl Rows {
    fn new(kv: &KvView, shape: &AttnShape) -> Rows {
        let bytes = |n: usize| {
            kv.ty
                .row_bytes(n as u64)
                .expect("KV head size fits the cache type") as usize
        };
        let (k_head, v_head) = (bytes(shape.head_dim_k), bytes(shape.head_dim_v));
        let n_cells = kv.k.len() / (k_head * shape.n_kv_head);
        assert!(
            kv.v.len() >= n_cells * v_head * shape.n_kv_head,
            "V cache shorter than K cache"
        );
        Rows {
            k_head,
            v_head,
            n_cells,
        }
    }

    /// The key half's head bytes and cells, as [`load_rows`] takes them.
    fn k(&self) -> (usize, usize) {
        (self.k_head, self.n_cells)
    }

    fn v(&self) -> (usize, usize) {
        (self.v_head, self.n_cells)
    }
}

/// The bytes of cells `cells` of KV head `kvh` in a cache half whose heads take `head` bytes.
fn run(data: &[u8], head: usize, n_cells: usize, kvh: usize, cells: Range<usize>) -> &[u8] {
    let at = (kvh * n_cells + cells.start) * head;
    &data[at..at + cells.len() * head]
}

/// Bytes of K or V rows converted at a time by [`load_rows`], which first asks for the same rows
/// of the next block: a long context's KV cache comes from memory every token, and asking a piece
/// at a time keeps reads in flight without stalling on the core's few miss buffers (as a whole
/// block asked at once does). Decode attention of Qwen2.5 0.5B over 4096 cells, one thread
/// (`attn_bench`): 256 B 10.7 ms per token, 1 KiB 10.1, 2 KiB 10.5, 8 KiB 13.0, none 13.1.
const PIECE_BYTES: usize = 1024;
/// Bytes of f16 value rows [`attend_tile`] takes into the weighted sums at a time (a decode
/// step's, where the sums convert them as they load them), after asking for the same rows of the
/// next block. Qwen2.5 0.5B over 4096 cells, one thread (`attn_bench`, ms per token): 1 KiB
/// 3.68 / 3.75, 2 KiB 3.54 / 3.54, 4 KiB 3.51 / 3.52, the whole block (8 KiB) 3.52 / 3.55.
const VALUE_PIECE_BYTES: usize = 4096;

/// The bytes of the same cells as `cells` in the next block, up to cell `ahead_end`, of KV head
/// `kvh` of a cache half whose heads take `head` bytes: what a block's reader asks for while it
/// works on its own block.
fn next_block(
    data: &[u8],
    (head, n_cells): (usize, usize),
    kvh: usize,
    cells: Range<usize>,
    ahead_end: usize,
) -> &[u8] {
    let next = cells.start + BLOCK_CELLS..(cells.end + BLOCK_CELLS).min(ahead_end);
    if next.is_empty() {
        &[]
    } else {
        run(data, head, n_cells, kvh, next)
    }
}

/// Cells `cells` of KV head `kvh` of a cache half in f32, row after row `stride` apart in `out`
/// (zeros after each row's `width` values), converted piece by piece (whole pieces at once when
/// the rows are not padded) while asking for the same cells of the next block, up to cell
/// `ahead_end`.
#[allow(clippy::too_many_arguments)]
fn load_rows(
    isa: Isa,
    ty: GgmlType,
    data: &[u8],
    (head, n_cells): (usize, usize),
    kvh: usize,
    cells: Range<usize>,
    ahead_end: usize,
    (width, stride): (usize, usize),
    paired: bool,
    out: &mut [f32],
) {
    debug_assert!(!paired || (ty == GgmlType::F16 && width == stride));
    let convert = |src: &[u8], dst: &mut [f32]| match ty {
        GgmlType::F16 => k::f16_row(isa, src, dst),
        GgmlType::Q8_0 => k::q8_0_row(isa, src, dst),
        _ => crate::quant::dequantize_row(ty, src, dst).expect("KV cache type dequantizes"),
    };
    let ahead = next_block(data, (head, n_cells), kvh, cells.clone(), ahead_end);
    let src = run(data, head, n_cells, kvh, cells.clone());
    // Paired rows go two by two: the pieces hold an even number.
    let rows = (PIECE_BYTES / head)
        .max(1)
        .next_multiple_of(1 + usize::from(paired));
    let n_paired = if paired { k::paired_cells(cells.len()) } else { 0 };
    for (i, piece) in src.chunks(rows * head).enumerate() {
        if let Some(a) = ahead.get(i * rows * head..) {
            k::prefetch(&a[..a.len().min(rows * head)]);
        }
        let out = &mut out[i * rows * stride..];
        let r0 = i * rows;
        if r0 < n_paired {
            // The piece's rows up to `n_paired` (an even number of them: `r0` is even).
            let np = (n_paired - r0).min(piece.len() / head);
            k::f16_key_pairs(isa, &piece[..np * head], width, &mut out[..np * width]);
            let rest = &piece[np * head..];
            convert(rest, &mut out[np * width..np * width + rest.len() / head * width]);
        } else if stride == width {
            convert(piece, &mut out[..piece.len() / head * width]);
        } else {
            for (s, o) in piece.chunks_exact(head).zip(out.chunks_exact_mut(stride)) {
                convert(s, &mut o[..width]);
                o[width..].fill(0.0);
            }
        }
    }
}

/// A query head rounded through the cache's dot format, back in f32 (F16 with `isa`'s exact
/// conversion: a prompt rounds every query head of every layer, and the scalar one was ~1% of
/// pp512).
fn round_query(isa: Isa, ty: GgmlType, q: &[f32], buf: &mut Vec<u8>, out: &mut [f32]) {
    let q_ty = vec_dot_type(ty);
    let n = q_ty
        .row_bytes(q.len() as u64)
        .expect("head size fits the query format") as usize;
    buf.resize(n, 0);
    quantize_row(q_ty, q, buf);
    if q_ty == GgmlType::F16 {
        k::f16_row(isa, buf, out);
    } else {
        crate::quant::dequantize_row(q_ty, buf, out).expect("query format dequantizes");
    }
}

/// A raw score, soft-capped and scaled (without soft-capping, just scaled: `x * kq_scale`).
#[inline]
fn finish_score(x: f32, shape: &AttnShape) -> f32 {
    let x = if shape.softcap > 0.0 {
        shape.softcap * (x / shape.softcap).tanh()
    } else {
        x
    };
    x * shape.kq_scale
}

/// The cells one query row sees, strictly ascending: checked once where the list is made. The
/// forward pass makes each row's list once per batch and every tile of every layer and KV head
/// takes it as it is; checking it in each tile was ~1.3% of Qwen2.5 0.5B's pp512 after 4096
/// tokens (`perf`).
#[derive(Clone, Copy, Debug)]
pub struct Visible<'a>(&'a [u32]);

impl<'a> Visible<'a> {
    /// # Panics
    /// If `cells` is not strictly ascending.
    pub fn new(cells: &'a [u32]) -> Visible<'a> {
        // Without an early exit, so that it vectorizes.
        let ascending = cells.windows(2).fold(true, |ok, w| ok & (w[0] < w[1]));
        assert!(ascending, "visible cells ascending");
        Visible(cells)
    }

    pub fn cells(self) -> &'a [u32] {
        self.0
    }
}

/// Reusable buffers of one worker for [`attend_head`].
#[derive(Default)]
pub struct Scratch {
    q: Vec<u8>,
    qf: Vec<f32>,
    row: Vec<f32>,
    scores: Vec<f32>,
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

/// Query head `h` of one token (`q` holds all its heads) over its visible `cells` (ascending):
/// writes `head_dim_v` values to `out`. The plain scalar reference that [`attend_tile`], which the
/// forward pass uses, is tested against bit for bit: the same operations per query, one cell at a
/// time.
pub fn attend_head(
    q: &[f32],
    kv: KvView,
    cells: &[u32],
    shape: &AttnShape,
    h: usize,
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    let (dk, dv) = (shape.head_dim_k, shape.head_dim_v);
    assert!(shape.n_kv_head > 0 && shape.n_head.is_multiple_of(shape.n_kv_head) && h < shape.n_head);
    assert_eq!(q.len(), shape.n_head * dk);
    assert_eq!(out.len(), dv);
    let rows = Rows::new(&kv, shape);
    let kvh = h / (shape.n_head / shape.n_kv_head);
    let sc = scratch;
    sc.qf.resize(dk, 0.0);
    round_query(
        Isa::Scalar,
        kv.ty,
        &q[h * dk..(h + 1) * dk],
        &mut sc.q,
        &mut sc.qf,
    );
    sc.row.resize(dk.max(dv), 0.0);
    sc.scores.clear();
    for &c in cells {
        let kr = &mut sc.row[..dk];
        let c = c as usize;
        load_rows(
            Isa::Scalar,
            kv.ty,
            kv.k,
            rows.k(),
            kvh,
            c..c + 1,
            c + 1,
            (dk, dk),
            false,
            kr,
        );
        let x = sc
            .qf
            .iter()
            .zip(kr.iter())
            .fold(0f32, |acc, (&a, &b)| a.mul_add(b, acc));
        sc.scores.push(finish_score(x, shape));
    }
    // The softmax: the maximum first (exact), then each weight before normalization added to
    // the sum and, times its value row, to the output, cell after cell; the output times the
    // sum's inverse last (as llama.cpp's flash attention: a multiply per value, not a division).
    let m = sc.scores.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
    out.fill(0.0);
    if m == f32::NEG_INFINITY {
        return;
    }
    let mut l = 0f32;
    for (&c, &s) in cells.iter().zip(&sc.scores) {
        let w = k::weight(s, m, kv.ty == GgmlType::F16);
        l += w;
        if w != 0.0 {
            let vr = &mut sc.row[..dv];
            let c = c as usize;
            load_rows(
                Isa::Scalar,
                kv.ty,
                kv.v,
                rows.v(),
                kvh,
                c..c + 1,
                c + 1,
                (dv, dv),
                false,
                vr,
            );
            for (o, &v) in out.iter_mut().zip(vr.iter()) {
                *o = w.mul_add(v, *o);
            }
        }
    }
    let inv = 1.0 / l;
    out.iter_mut().for_each(|o| *o *= inv);
}

/// Most query rows of one tile of [`attend_tile`] ([`tile_rows`]).
pub const TILE_ROWS: usize = 16;

/// Query rows of one prompt tile of [`attend_tile`] for KV heads of `group` query heads: with them,
/// the queries that share each K row read and each K/V row conversion, and the tile's fixed costs
/// (plan, masks, the queries' rounding and transposition). A tile's queries go in vectors of
/// [`LANES`] (8 lanes for at most 8, [`k::padded_queries`]): 8 rows, unless their queries would
/// leave lanes empty, then 16 (odd groups from 3: Qwen2.5 0.5B's 7 heads made 56 queries in 64
/// lanes, and make 112 in 112). Intel Xeon, two threads, pp512, alternated runs, 8 -> 16 rows:
/// Qwen2.5 0.5B after 4096 tokens 271.0 / 271.5 / 269.6 / 274.5 / 273.2 / 274.5 -> 298.1 / 296.2 /
/// 293.9 / 299.0 / 305.7 / 305.9 t/s (32 rows: 286.9 / 298.9), from an empty cache 613.8 / 646.7 /
/// 631.9 / 640.5 -> 640.8 / 646.0 / 681.0 / 674.5. Where 8 rows fill their lanes, 16 gained
/// nothing: Gemma 3 270M's 4 heads (32 -> 64 lanes) level within its noise (seven pairs from an
/// empty cache, medians 1809 -> 1802), TinyLlama's 8 (64 -> 128 lanes, whose scores over a long
/// context no longer stay in L2) 154.4 / 151.5 -> 148.9 / 150.1 after 4096 tokens, its Q6_K level
/// from an empty cache. The tiling never changes the numbers (see the module doc).
pub fn tile_rows(group: usize) -> usize {
    let rows = TILE_ROWS / 2;
    if k::padded_queries(rows * group) > rows * group {
        TILE_ROWS
    } else {
        rows
    }
}

/// Cells per block, by absolute cell index: a block's K and V rows are converted to f32 once per
/// tile and pass, and stay in cache while every query of the tile takes them in. Blocks shape the
/// work only, never the numbers (see the module doc).
pub const BLOCK_CELLS: usize = 64;
/// Most scores (f32) a tile keeps from its first pass to its second: 8 MB (16 KB in unit tests,
/// so that their longer contexts take the path that computes the scores again), 18k cells of a
/// tile of 112 query lanes ([`tile_rows`]: 16 rows of Qwen2.5 0.5B's 7 heads), 16k of 128 (8
/// rows of 16 heads). Reading them back from L3 or memory costs far less than computing them
/// again: with tiles of 8 rows (64 lanes) and 4 MB, Qwen2.5 0.5B's pp512 after 4096 tokens went
/// 1.2-1.4x faster than with the former 256 KB, Gemma 3 270M's 1.05-1.13x.
const KEEP_SCORES: usize = if cfg!(test) { 1 << 12 } else { 2 << 20 };

/// Reusable buffers of one worker for [`attend_tile`] and the split decode steps
/// ([`split_scores`], [`split_sums`]); their size depends on the tile and the head sizes, not on
/// the context length (except one bit mask per row and block, and the kept scores, up to
/// [`KEEP_SCORES`]).
#[derive(Default)]
pub struct TileScratch {
    q: Vec<u8>,
    qf: Vec<f32>,
    qt: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    s: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    acc: Vec<f32>,
    by_query: Vec<f32>,
    masks: Vec<u64>,
}

/// What the passes over one tile's blocks share: its queries' layout, the blocks its rows see and
/// the cache's shape. Made from the tile alone, so two steps that take the same tile in parts
/// (the split decode steps) agree on every block.
struct Plan<'a> {
    isa: Isa,
    kv: KvView<'a>,
    shape: AttnShape,
    rows: Rows,
    kvh: usize,
    heads: Range<usize>,
    n_rows: usize,
    nq: usize,
    nqp: usize,
    dvp: usize,
    round_f16: bool,
    /// F16 keys go to the scores paired where the tier wants them so (converted and paired in
    /// one pass); other types in rows.
    paired: bool,
    /// F16 keys go to the scores as they are where the tier converts them in registers.
    f16_keys: bool,
    /// F16 values go into the weighted sums as they are where the tier converts them as it
    /// loads them; otherwise a block's rows are converted to f32 first.
    f16_values: bool,
    /// The values of each head the outputs take: all of them, but for a split decode step's
    /// parts ([`split_sums`]).
    dims: Range<usize>,
    /// One past the last visible cell: the readers ask ahead for the next block up to it.
    hi: usize,
    /// The blocks that hold visible cells.
    blocks: Range<usize>,
}

impl<'a> Plan<'a> {
    /// The plan of a tile of `cells.len()` rows for query heads `heads` (all of one KV head's
    /// group); checks that every row's cells are inside the cache.
    fn new(isa: Isa, kv: KvView<'a>, cells: &[Visible], shape: &AttnShape, heads: Range<usize>) -> Plan<'a> {
        let AttnShape {
            n_head,
            n_kv_head,
            head_dim_k: dk,
            head_dim_v: dv,
            ..
        } = *shape;
        assert!(isa.is_supported(), "{isa} kernels on a CPU without them");
        assert!(n_kv_head > 0 && n_head % n_kv_head == 0 && heads.end <= n_head && !heads.is_empty());
        let group = n_head / n_kv_head;
        let kvh = heads.start / group;
        assert_eq!((heads.end - 1) / group, kvh, "heads of one KV head");
        let rows = Rows::new(&kv, shape);
        let n_rows = cells.len();
        let nq = n_rows * heads.len();
        let nqp = k::padded_queries(nq);
        let mut lo = usize::MAX;
        let mut hi = 0;
        for c in cells {
            // Ascending (`Visible`): the last cell is the largest.
            let c = c.cells();
            if let (Some(&a), Some(&b)) = (c.first(), c.last()) {
                assert!((b as usize) < rows.n_cells, "visible cell outside the cache");
                lo = lo.min(a as usize);
                hi = hi.max(b as usize + 1);
            }
        }
        let blocks = if lo < hi {
            lo / BLOCK_CELLS..(hi - 1) / BLOCK_CELLS + 1
        } else {
            0..0
        };
        Plan {
            isa,
            kv,
            shape: *shape,
            rows,
            kvh,
            heads,
            n_rows,
            nq,
            nqp,
            dvp: dv.div_ceil(LANES) * LANES,
            round_f16: kv.ty == GgmlType::F16,
            paired: kv.ty == GgmlType::F16 && k::pairs_layout(isa, nq, nqp, dk),
            f16_keys: kv.ty == GgmlType::F16 && k::keys_from_f16(isa, nq, dk),
            f16_values: kv.ty == GgmlType::F16 && k::values_from_f16(isa, nqp, dv),
            dims: 0..dv,
            hi,
            blocks,
        }
    }

    /// The plan for values `dims` of each head only (a part of a split decode step), which the
    /// weighted sums take from f16 rows as they are.
    fn with_dims(mut self, dims: Range<usize>) -> Plan<'a> {
        assert!(dims.end <= self.shape.head_dim_v && !dims.is_empty());
        self.f16_values = self.kv.ty == GgmlType::F16 && k::values_from_f16(self.isa, self.nqp, dims.len());
        assert!(self.f16_values, "parts of value rows only as f16 rows");
        self.dvp = dims.len();
        self.dims = dims;
        self
    }

    /// Floats of one block's scores: [`BLOCK_CELLS`] cells of `nqp` query lanes.
    fn block_len(&self) -> usize {
        BLOCK_CELLS * self.nqp
    }

    /// Queries rounded through the cache's dot format, row by row in `qf` (padding queries
    /// zero), then transposed into `qt[d * nqp + i]`; query i is (row i / n_heads, head
    /// heads.start + i % n_heads). `q[r]` holds all query heads of row `r`.
    fn queries(&self, q: &[&[f32]], sc: &mut TileScratch) {
        let (dk, n_heads) = (self.shape.head_dim_k, self.heads.len());
        assert_eq!(q.len(), self.n_rows);
        sc.qf.clear();
        sc.qf.resize(self.nqp * dk, 0.0);
        for (i, qf) in sc.qf.chunks_exact_mut(dk).take(self.nq).enumerate() {
            let h = self.heads.start + i % n_heads;
            let qr = q[i / n_heads];
            assert_eq!(qr.len(), self.shape.n_head * dk);
            round_query(self.isa, self.kv.ty, &qr[h * dk..(h + 1) * dk], &mut sc.q, qf);
        }
        sc.qt.resize(dk * self.nqp, 0.0);
        k::transpose(self.isa, &sc.qf, self.nqp, dk, &mut sc.qt);
        sc.k.resize(BLOCK_CELLS * dk, 0.0);
    }

    /// Empty running maxima, sums and weighted sums.
    fn start_sums(&self, sc: &mut TileScratch) {
        sc.m.clear();
        sc.m.resize(self.nqp, f32::NEG_INFINITY);
        sc.l.clear();
        sc.l.resize(self.nqp, 0.0);
        let layout = k::AccLayout::new(self.isa, self.nqp, self.dvp);
        sc.acc.clear();
        sc.acc.resize(layout.size(), 0.0);
        sc.v.resize(BLOCK_CELLS * self.dvp, 0.0);
    }

    /// Which cells of blocks `blocks` (of [`Plan::blocks`]) each row sees: one bit per cell, in
    /// `sc.masks[(b - blocks.start) * n_rows + r]`.
    fn masks(&self, cells: &[Visible], blocks: Range<usize>, sc: &mut TileScratch) {
        let n_rows = self.n_rows;
        sc.masks.clear();
        sc.masks.resize(blocks.len() * n_rows, 0);
        for (r, c) in cells.iter().enumerate() {
            let c = c.cells();
            let mut cur = c.partition_point(|&x| (x as usize) < blocks.start * BLOCK_CELLS);
            for (bi, b) in blocks.clone().enumerate() {
                let (start, end) = (b * BLOCK_CELLS, (b + 1) * BLOCK_CELLS);
                // A whole block at once (a sequence's cells side by side, the common case): in an
                // ascending list, entries `start` and `start + 63` 63 apart are the block's 64
                // cells.
                let whole = c.get(cur) == Some(&(start as u32))
                    && c.get(cur + BLOCK_CELLS - 1) == Some(&((end - 1) as u32));
                let mask = if whole {
                    cur += BLOCK_CELLS;
                    u64::MAX
                } else {
                    let mut mask = 0u64;
                    while let Some(&x) = c.get(cur).filter(|&&x| (x as usize) < end) {
                        mask |= 1 << (x as usize - start);
                        cur += 1;
                    }
                    mask
                };
                sc.masks[bi * n_rows + r] = mask;
            }
        }
    }

    /// The cells of a block some row sees, given the rows' masks of it: `first..first + nc` of
    /// the block.
    fn span(masks: &[u64]) -> Option<(usize, usize)> {
        let any = masks.iter().fold(0, |a, m| a | m);
        let first = any.trailing_zeros() as usize;
        (any != 0).then(|| (first, BLOCK_CELLS - any.leading_zeros() as usize - first))
    }

    /// The scores of block `b` (cells `b * BLOCK_CELLS + first..` +nc) into `s`, masked ones
    /// -inf; `masks` are the rows' masks of the block.
    fn block_scores(
        &self,
        qt: &[f32],
        masks: &[u64],
        b: usize,
        (first, nc): (usize, usize),
        keys: &mut [f32],
        s: &mut [f32],
    ) {
        let (isa, nqp, nq, dk) = (self.isa, self.nqp, self.nq, self.shape.head_dim_k);
        let c0 = b * BLOCK_CELLS + first;
        let kv = &self.kv;
        // F16 keys the scores convert in registers: whole groups of 16 cells straight from the
        // cache (asking for the next block's as they go), the rest converted first.
        let done = if self.f16_keys {
            let (head, n_cells) = self.rows.k();
            let src = run(kv.k, head, n_cells, self.kvh, c0..c0 + nc);
            let ahead = if c0 + BLOCK_CELLS < self.hi {
                BLOCK_CELLS * head
            } else {
                0
            };
            k::scores_f16(isa, qt, nqp, nq, src, dk, nc, ahead, s)
        } else {
            0
        };
        if done < nc {
            let range = c0 + done..c0 + nc;
            let rows = self.rows.k();
            load_rows(
                isa,
                kv.ty,
                kv.k,
                rows,
                self.kvh,
                range,
                self.hi,
                (dk, dk),
                self.paired,
                keys,
            );
            k::scores(
                isa,
                qt,
                nqp,
                nq,
                keys,
                dk,
                nc - done,
                self.paired,
                &mut s[done * nqp..],
            );
        }
        // The block's scores finished over the whole block (padding lanes too: nothing reads
        // them), then, unless every row sees all the cells, the cells a row does
        // not see masked.
        let s = &mut s[..nc * nqp];
        let shape = &self.shape;
        if shape.softcap > 0.0 {
            s.iter_mut().for_each(|x| *x = finish_score(*x, shape));
        } else {
            k::scale(isa, s, shape.kq_scale);
        }
        let span = (u64::MAX >> (64 - nc)) << first;
        if masks.iter().any(|m| m & span != span) {
            for (j, srow) in s.chunks_exact_mut(nqp).enumerate() {
                for (mask, x) in masks.iter().zip(srow[..nq].chunks_exact_mut(self.heads.len())) {
                    if mask >> (first + j) & 1 == 0 {
                        x.fill(f32::NEG_INFINITY);
                    }
                }
            }
        }
    }

    /// Block `b`'s scores `s` (cells `first..first + nc` of the block) as weights, added to the
    /// sums `sc.l` and, times the block's values, to the outputs' sums `sc.acc`; `sc.m` holds
    /// the final maxima.
    fn block_sums(&self, b: usize, (first, nc): (usize, usize), s: &mut [f32], sc: &mut TileScratch) {
        let (isa, kv, nqp, nq) = (self.isa, &self.kv, self.nqp, self.nq);
        let (dv, dvp) = (self.shape.head_dim_v, self.dvp);
        let c0 = b * BLOCK_CELLS + first;
        k::weights(isa, s, nqp, nc, &sc.m, &mut sc.l, self.round_f16);
        if self.f16_values {
            let (head, n_cells) = self.rows.v();
            let ahead = next_block(kv.v, (head, n_cells), self.kvh, c0..c0 + nc, self.hi);
            let v = run(kv.v, head, n_cells, self.kvh, c0..c0 + nc);
            // Piece by piece, each after asking for the same rows of the next block; the sums go
            // on from one piece to the next in cell order. Values `dims` of each row.
            let piece = (VALUE_PIECE_BYTES / head).max(1);
            let (skip, width) = (2 * self.dims.start, self.dims.len());
            for r0 in (0..nc).step_by(piece) {
                let r1 = (r0 + piece).min(nc);
                if let Some(a) = ahead.get(r0 * head..) {
                    k::prefetch(&a[..a.len().min((r1 - r0) * head)]);
                }
                let v = &v[r0 * head + skip..r1 * head];
                let s = &s[r0 * nqp..];
                k::weighted_values_f16(isa, s, nqp, nq, v, (dv, width), r1 - r0, &mut sc.acc);
            }
        } else {
            let range = c0..c0 + nc;
            load_rows(
                isa,
                kv.ty,
                kv.v,
                self.rows.v(),
                self.kvh,
                range,
                self.hi,
                (dv, dvp),
                false,
                &mut sc.v,
            );
            k::weighted_values(isa, s, nqp, nq, &sc.v, dvp, nc, &mut sc.acc);
        }
    }

    /// Each query's weighted sum times the inverse of its weights' sum, through `out(row,
    /// head)` (zeros for a query that saw nothing): its values [`Plan::dims`].
    fn outputs<'o>(&self, sc: &mut TileScratch, mut out: impl FnMut(usize, usize) -> &'o mut [f32]) {
        let (isa, nqp, dvp, width) = (self.isa, self.nqp, self.dvp, self.dims.len());
        // The sums by query (transposed if they are by value).
        let by_query = if k::AccLayout::new(isa, nqp, dvp).by_value() {
            sc.by_query.resize(nqp * dvp, 0.0);
            k::transpose(isa, &sc.acc, dvp, nqp, &mut sc.by_query);
            &sc.by_query
        } else {
            &sc.acc
        };
        let n_heads = self.heads.len();
        for (i, (acc, &l)) in by_query.chunks_exact(dvp).zip(&sc.l).take(self.nq).enumerate() {
            let o = out(i / n_heads, self.heads.start + i % n_heads);
            assert_eq!(o.len(), width, "an output of the plan's values");
            if l == 0.0 {
                o.fill(0.0);
            } else {
                let inv = 1.0 / l;
                o.iter_mut().zip(&acc[..width]).for_each(|(o, &a)| *o = a * inv);
            }
        }
    }
}

/// A query that sees nothing keeps the maximum -inf, taken as 0 so that its weights are all
/// zero (and its output zero) rather than NaN.
fn finish_maxima(m: &mut [f32]) {
    for m in m {
        if *m == f32::NEG_INFINITY {
            *m = 0.0;
        }
    }
}

/// Attention of a tile of query rows for query heads `heads` (all of one KV head's group), flash
/// style: block by block of [`BLOCK_CELLS`] cells, the block's K rows are converted to f32 once for
/// all queries of the tile, the scores are a small f32 GEMM (queries x cells), a first pass takes
/// each query's maximum, then a second pass takes the same scores (kept, or computed again past
/// [`KEEP_SCORES`]), turns them into weights, adds them up and adds the block's V rows (converted
/// once) times them into f32 accumulators, times the sums' inverses at the end. Memory is bounded
/// by the tile, the block and [`KEEP_SCORES`], whatever the context length.
///
/// `q[r]` holds all `n_head` query heads of row `r`; `cells[r]` the cells row `r` may see (the
/// causal and sliding-window masks are these lists). Writes `head_dim_v`
/// values per (row, head) through `out(r, h)`.
///
/// Every query sees the operations of [`attend_head`] in the same order, so the result is the same
/// bits whatever the tile or the cells' place in blocks: a prompt evaluated in one batch, in
/// chunks or token by token gives the same logits, and so does a sequence given other cells.
pub fn attend_tile<'o>(
    q: &[&[f32]],
    kv: KvView,
    cells: &[Visible],
    shape: &AttnShape,
    heads: Range<usize>,
    scratch: &mut TileScratch,
    out: impl FnMut(usize, usize) -> &'o mut [f32],
) {
    attend_tile_isa(Isa::active(), q, kv, cells, shape, heads, scratch, out)
}

/// [`attend_tile`] with the kernels of `isa` (which the CPU must support).
#[allow(clippy::too_many_arguments)]
pub fn attend_tile_isa<'o>(
    isa: Isa,
    q: &[&[f32]],
    kv: KvView,
    cells: &[Visible],
    shape: &AttnShape,
    heads: Range<usize>,
    scratch: &mut TileScratch,
    out: impl FnMut(usize, usize) -> &'o mut [f32],
) {
    let plan = Plan::new(isa, kv, cells, shape, heads);
    let sc = scratch;
    plan.queries(q, sc);
    plan.start_sums(sc);
    plan.masks(cells, plan.blocks.clone(), sc);
    let n_rows = plan.n_rows;
    // The scores of a span up to [`KEEP_SCORES`] are kept from the first pass to the second;
    // those of a longer one are computed again, to the same bits.
    let block_len = plan.block_len();
    let keep = plan.blocks.len() * block_len <= KEEP_SCORES;
    let mut s = std::mem::take(&mut sc.s);
    s.resize(if keep { plan.blocks.len().max(1) } else { 1 } * block_len, 0.0);
    let at = |bi: usize| if keep { bi * block_len } else { 0 };

    // Pass 1: each query's maximum score.
    let mut keys = std::mem::take(&mut sc.k);
    for (bi, b) in plan.blocks.clone().enumerate() {
        let masks = &sc.masks[bi * n_rows..(bi + 1) * n_rows];
        if let Some(sp) = Plan::span(masks) {
            let s = &mut s[at(bi)..at(bi) + block_len];
            plan.block_scores(&sc.qt, masks, b, sp, &mut keys, s);
            k::block_max(isa, s, plan.nqp, sp.1, &mut sc.m);
        }
    }
    finish_maxima(&mut sc.m);
    // Pass 2: the same scores (kept or again) as weights, added to the sums and, times the
    // block's values, to the outputs.
    for (bi, b) in plan.blocks.clone().enumerate() {
        let masks = &sc.masks[bi * n_rows..(bi + 1) * n_rows];
        if let Some(sp) = Plan::span(masks) {
            let s = &mut s[at(bi)..at(bi) + block_len];
            if !keep {
                plan.block_scores(&sc.qt, masks, b, sp, &mut keys, s);
            }
            plan.block_sums(b, sp, s, sc);
        }
    }
    sc.k = keys;
    sc.s = s;
    plan.outputs(sc, out);
}

/// The blocks of a split decode step's part `part` of `parts`, as indices into its row's blocks
/// (of `n_blocks`): each part about as many.
fn part_blocks(n_blocks: usize, part: usize, parts: usize) -> Range<usize> {
    n_blocks * part / parts..n_blocks * (part + 1) / parts
}

/// The visible blocks of a row that sees `cells` (ascending).
fn row_blocks(cells: &[u32]) -> usize {
    match (cells.first(), cells.last()) {
        (Some(&a), Some(&b)) => b as usize / BLOCK_CELLS - a as usize / BLOCK_CELLS + 1,
        _ => 0,
    }
}

/// Floats of the scores a split decode step of one row that sees `cells` keeps per KV head of
/// `group` query heads between its two steps: [`split_scores`]' output, [`split_sums`]' input.
pub fn split_len(cells: &[u32], group: usize) -> usize {
    row_blocks(cells) * BLOCK_CELLS * k::padded_queries(group)
}

/// Where the scores [`split_scores`] writes for part `part` of `parts` lie in the row's
/// [`split_len`].
pub fn split_part(cells: &[u32], group: usize, part: usize, parts: usize) -> Range<usize> {
    let per_block = BLOCK_CELLS * k::padded_queries(group);
    let blocks = part_blocks(row_blocks(cells), part, parts);
    blocks.start * per_block..blocks.end * per_block
}

/// Floats of the maxima [`split_scores`] writes per part: the group's query lanes.
pub fn split_maxima_len(group: usize) -> usize {
    k::padded_queries(group)
}

/// The values of each head that part `part` of `parts` of a split decode step's second step
/// takes, of `dv`: whole vectors of [`LANES`], about as many per part.
pub fn split_dims(dv: usize, part: usize, parts: usize) -> Range<usize> {
    let n = dv / LANES;
    LANES * (n * part / parts)..LANES * (n * (part + 1) / parts)
}

/// Whether a decode step of a KV head of `group` query heads of `dv` values may split into
/// `parts` parts on `isa` with a cache of `ty`: every part takes some values, as f16 rows the
/// tier reads as they are (AVX-512, an F16 cache). Elsewhere each part would convert every value
/// row: no better than a part per query heads.
pub fn can_split(isa: Isa, ty: GgmlType, group: usize, dv: usize, parts: usize) -> bool {
    let nqp = k::padded_queries(group);
    ty == GgmlType::F16
        && dv.is_multiple_of(LANES)
        && (1..=dv / LANES).contains(&parts)
        && (0..parts).all(|p| k::values_from_f16(isa, nqp, split_dims(dv, p, parts).len()))
}

/// Decode attention of one row split over `parts` tasks twice, for a KV head whose query heads
/// are fewer than the threads (Gemma 3: one KV head of 4 query heads): where tasks that each took
/// some of the group's heads each read and converted every key of the KV head and every value
/// row, the first step's task `part` takes every head's scores over its part of the cells (this
/// function), the second step's task `part` every head's weights and weighted sums of its part
/// of the values over all cells ([`split_sums`]). Each query sees the operations of
/// [`attend_head`] in the same order: the same bits as [`attend_tile`]. Only where
/// [`can_split`] holds.
///
/// `q` holds the row's query heads; `cells` the cells it sees; `kvh` the KV head;
/// `s` this part's [`split_part`] of the row's scores; `m` takes this part's maximum score of
/// each of the group's query lanes ([`split_maxima_len`]).
#[allow(clippy::too_many_arguments)]
pub fn split_scores(
    isa: Isa,
    q: &[f32],
    kv: KvView,
    cells: Visible,
    shape: &AttnShape,
    kvh: usize,
    (part, parts): (usize, usize),
    scratch: &mut TileScratch,
    s: &mut [f32],
    m: &mut [f32],
) {
    let group = shape.n_head / shape.n_kv_head.max(1);
    let plan = Plan::new(isa, kv, &[cells], shape, kvh * group..(kvh + 1) * group);
    let sc = scratch;
    let blocks = part_blocks(plan.blocks.len(), part, parts);
    let blocks = plan.blocks.start + blocks.start..plan.blocks.start + blocks.end;
    let block_len = plan.block_len();
    assert_eq!(s.len(), blocks.len() * block_len, "split scores' size");
    assert_eq!(m.len(), plan.nqp, "split maxima's size");
    m.fill(f32::NEG_INFINITY);
    plan.queries(&[q], sc);
    plan.masks(&[cells], blocks.clone(), sc);
    let mut keys = std::mem::take(&mut sc.k);
    for ((bi, b), s) in blocks.enumerate().zip(s.chunks_exact_mut(block_len)) {
        let masks = &sc.masks[bi..bi + 1];
        if let Some(sp) = Plan::span(masks) {
            plan.block_scores(&sc.qt, masks, b, sp, &mut keys, s);
            k::block_max(isa, s, plan.nqp, sp.1, m);
        }
    }
    sc.k = keys;
}

/// The second step of a split decode step (see [`split_scores`]): every query head of KV head
/// `kvh` over all the row's cells, values `dims` ([`split_dims`]) of each, from the row's scores
/// `s` (its [`split_len`], every part's written) and every part's maxima `m` (one after the
/// other); writes `dims.len()` values per head through `out(h)`.
#[allow(clippy::too_many_arguments)]
pub fn split_sums<'o>(
    isa: Isa,
    kv: KvView,
    cells: Visible,
    shape: &AttnShape,
    kvh: usize,
    dims: Range<usize>,
    s: &[f32],
    m: &[f32],
    scratch: &mut TileScratch,
    mut out: impl FnMut(usize) -> &'o mut [f32],
) {
    let group = shape.n_head / shape.n_kv_head.max(1);
    let plan = Plan::new(isa, kv, &[cells], shape, kvh * group..(kvh + 1) * group).with_dims(dims);
    let sc = scratch;
    let (nqp, block_len) = (plan.nqp, plan.block_len());
    assert_eq!(s.len(), split_len(cells.cells(), group), "split scores' size");
    assert!(
        !m.is_empty() && m.len().is_multiple_of(nqp),
        "split maxima's size"
    );
    plan.start_sums(sc);
    // Each query's maximum over every part's cells (exact in any order).
    for (j, mj) in sc.m.iter_mut().enumerate() {
        *mj = m.chunks_exact(nqp).fold(f32::NEG_INFINITY, |a, mp| a.max(mp[j]));
    }
    finish_maxima(&mut sc.m);
    plan.masks(&[cells], plan.blocks.clone(), sc);
    let mut block = std::mem::take(&mut sc.s);
    block.resize(block_len, 0.0);
    for (bi, b) in plan.blocks.clone().enumerate() {
        if let Some(sp) = Plan::span(&sc.masks[bi..bi + 1]) {
            let n = sp.1 * nqp;
            block[..n].copy_from_slice(&s[bi * block_len..bi * block_len + n]);
            plan.block_sums(b, sp, &mut block, sc);
        }
    }
    sc.s = block;
    plan.outputs(sc, |_, h| out(h));
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

    #[test]
    fn prompt_tiles_fill_whole_vectors() {
        for group in 1..=16 {
            let rows = tile_rows(group);
            assert!(
                (TILE_ROWS / 2..=TILE_ROWS).contains(&rows),
                "group {group}: {rows} rows"
            );
            let nq = rows * group;
            assert_eq!(
                k::padded_queries(nq),
                nq,
                "group {group}: {rows} rows leave lanes empty"
            );
        }
        // Qwen2.5 0.5B's 7 heads take 16 rows; Gemma 3's 4 and TinyLlama's 8 fill 8, and one
        // head per KV head fills the 8-lane tiles.
        assert_eq!(
            (tile_rows(7), tile_rows(4), tile_rows(8), tile_rows(1)),
            (16, 8, 8, 8)
        );
    }

    /// The tiled path, on every instruction-set tier this CPU has, against the scalar per-head
    /// reference, bit for bit, on random caches: F16 with odd head sizes (and dk != dv) and Q8_0,
    /// GQA ratios 1 to 8, contexts from one cell to several blocks, causal rows with a sliding
    /// window and cells of another sequence left out, soft-capping; tiles of 1 to 16 rows.
    #[test]
    fn tiles_match_per_head_attention() {
        let mut seed = 7;
        let cases = [
            (GgmlType::F16, 40, 24, 6, 6, 0.0, &[1usize, 5, 70][..]),
            (GgmlType::F16, 40, 40, 6, 3, 0.0, &[150, 600][..]),
            (GgmlType::F16, 72, 72, 6, 2, 30.0, &[1, 70, 150][..]),
            (GgmlType::F16, 80, 80, 8, 1, 0.0, &[5, 130][..]),
            (GgmlType::F16, 64, 64, 32, 4, 0.0, &[1, 200][..]),
            (GgmlType::F16, 256, 256, 4, 1, 0.0, &[3, 100][..]),
            // Qwen2.5 0.5B's 7 query heads per KV head (keys paired on AVX-512), and 7 with
            // longer keys than values.
            (GgmlType::F16, 64, 64, 14, 2, 0.0, &[1, 64, 100][..]),
            (GgmlType::F16, 128, 64, 7, 1, 0.0, &[33, 300][..]),
            (GgmlType::Q8_0, 64, 64, 4, 2, 0.0, &[1, 5, 70, 150][..]),
            (GgmlType::Q8_0, 128, 128, 7, 1, 50.0, &[90][..]),
        ];
        for (ty, dk, dv, nh, nkv, softcap, contexts) in cases {
            for &n_cells in contexts {
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
                    let shape = scaled_shape(nh, nkv, (dk, dv), softcap);
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
                    for isa in Isa::supported() {
                        for per_tile in [TILE_ROWS, TILE_ROWS / 2, 3, 1] {
                            let got = tiled(isa, &qs, kv, &visible, &shape, per_tile);
                            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                                assert!(
                                    a.to_bits() == b.to_bits(),
                                    "{isa} tiles of {per_tile}: {ty:?} dk {dk} dv {dv} heads {nh}/{nkv} cells {n_cells} window {window:?}: value {i}: {a} vs {b}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// All rows' outputs through tiles of `per_tile` rows x each KV head's query heads.
    fn tiled(
        isa: Isa,
        qs: &[Vec<f32>],
        kv: KvView,
        visible: &[Vec<u32>],
        shape: &AttnShape,
        per_tile: usize,
    ) -> Vec<f32> {
        let (nh, dv) = (shape.n_head, shape.head_dim_v);
        let g = nh / shape.n_kv_head;
        let n_rows = qs.len();
        let mut got = vec![0f32; n_rows * nh * dv];
        let mut scratch = TileScratch::default();
        for r0 in (0..n_rows).step_by(per_tile) {
            let r1 = (r0 + per_tile).min(n_rows);
            let q: Vec<&[f32]> = qs[r0..r1].iter().map(|v| v.as_slice()).collect();
            let cells: Vec<Visible> = visible[r0..r1].iter().map(|v| Visible::new(v)).collect();
            for kvh in 0..shape.n_kv_head {
                let block = &mut got[r0 * nh * dv..r1 * nh * dv];
                let mut slots: Vec<Option<&mut [f32]>> = block.chunks_exact_mut(dv).map(Some).collect();
                attend_tile_isa(
                    isa,
                    &q,
                    kv,
                    &cells,
                    shape,
                    kvh * g..(kvh + 1) * g,
                    &mut scratch,
                    |r, h| slots[r * nh + h].take().expect("each output once"),
                );
            }
        }
        got
    }

    /// A decode step split over tasks twice (scores by cells, then sums by values), in 1 to 4
    /// parts, on every tier that can: the bits of the scalar per-head reference. Gemma 3's one KV
    /// head of 4 heads of 256 and smaller shapes, soft-capping, contexts from one cell to several
    /// blocks, with cells of other sequences and a window left out. Only F16 caches of whole
    /// vectors of values split.
    #[test]
    fn split_decode_matches_per_head_attention() {
        let mut seed = 17;
        let cases = [
            (256, 256, 4, 1, 0.0),
            (64, 64, 8, 2, 0.0),
            (40, 32, 6, 1, 30.0),
            (64, 48, 4, 2, 0.0),
        ];
        let ty = GgmlType::F16;
        for isa in Isa::supported() {
            assert!(!can_split(isa, GgmlType::Q8_0, 4, 256, 2) && !can_split(isa, ty, 4, 24, 2));
            assert!(!can_split(isa, ty, 4, 32, 3), "parts without values");
        }
        for (dk, dv, nh, nkv, softcap) in cases {
            let shape = scaled_shape(nh, nkv, (dk, dv), softcap);
            for n_cells in [1usize, 70, 300] {
                let head_k = ty.row_bytes(dk as u64).unwrap() as usize;
                let head_v = ty.row_bytes(dv as u64).unwrap() as usize;
                let mut kb = vec![0u8; nkv * n_cells * head_k];
                let mut vb = vec![0u8; nkv * n_cells * head_v];
                for c in kb.chunks_exact_mut(head_k) {
                    quantize_row(ty, &random(dk, &mut seed), c);
                }
                for c in vb.chunks_exact_mut(head_v) {
                    quantize_row(ty, &random(dv, &mut seed), c);
                }
                let kv = KvView { ty, k: &kb, v: &vb };
                let t = n_cells - 1;
                for window in [None, Some(100usize)] {
                    let cells: Vec<u32> = (0..=t)
                        .filter(|&c| (c % 7 != 3 || c == t) && window.is_none_or(|w| t - c < w))
                        .map(|c| c as u32)
                        .collect();
                    let q: Vec<f32> = random(nh * dk, &mut seed).iter().map(|x| x * 3.0).collect();
                    let mut want = vec![0f32; nh * dv];
                    attend(&q, kv, &cells, &shape, &mut Scratch::default(), &mut want);
                    for isa in Isa::supported() {
                        for parts in (1..=4).filter(|&p| can_split(isa, ty, nh / nkv, dv, p)) {
                            let got = split(isa, &q, kv, &cells, &shape, parts);
                            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                                assert!(
                                    a.to_bits() == b.to_bits(),
                                    "{isa} {parts} parts: dk {dk} dv {dv} heads {nh}/{nkv} cells {n_cells} window {window:?}: value {i}: {a} vs {b}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// One row's outputs through [`split_scores`] and [`split_sums`] in `parts` parts per KV
    /// head, the parts of each step taken in reverse order (as threads might).
    fn split(isa: Isa, q: &[f32], kv: KvView, cells: &[u32], shape: &AttnShape, parts: usize) -> Vec<f32> {
        let (nh, dv) = (shape.n_head, shape.head_dim_v);
        let group = nh / shape.n_kv_head;
        let m_len = split_maxima_len(group);
        let mut got = vec![f32::NAN; nh * dv];
        let mut scratch = TileScratch::default();
        for kvh in 0..shape.n_kv_head {
            let mut s = vec![f32::NAN; split_len(cells, group)];
            let mut m = vec![f32::NAN; parts * m_len];
            for p in (0..parts).rev() {
                let at = split_part(cells, group, p, parts);
                split_scores(
                    isa,
                    q,
                    kv,
                    Visible::new(cells),
                    shape,
                    kvh,
                    (p, parts),
                    &mut scratch,
                    &mut s[at],
                    &mut m[p * m_len..(p + 1) * m_len],
                );
            }
            for p in (0..parts).rev() {
                let dims = split_dims(dv, p, parts);
                let mut slots: Vec<Option<&mut [f32]>> = got
                    .chunks_exact_mut(dv)
                    .map(|o| Some(&mut o[dims.clone()]))
                    .collect();
                split_sums(
                    isa,
                    kv,
                    Visible::new(cells),
                    shape,
                    kvh,
                    dims.clone(),
                    &s,
                    &m,
                    &mut scratch,
                    |h| slots[h].take().expect("each output once"),
                );
            }
        }
        got
    }

    /// `n_head` query heads over `n_kv_head` KV heads of `dk` keys and `dv` values, scores scaled
    /// by `1 / sqrt(dk)` and soft-capped at `softcap` (0: not).
    fn scaled_shape(n_head: usize, n_kv_head: usize, (dk, dv): (usize, usize), softcap: f32) -> AttnShape {
        AttnShape {
            n_head,
            n_kv_head,
            head_dim_k: dk,
            head_dim_v: dv,
            kq_scale: 1.0 / (dk as f32).sqrt(),
            softcap,
        }
    }

    /// `n_head` query heads over `n_kv_head` KV heads of `head_dim` (keys and values), scores
    /// scaled by 1/8, no soft-capping.
    fn plain_shape(n_head: usize, n_kv_head: usize, head_dim: usize) -> AttnShape {
        AttnShape {
            n_head,
            n_kv_head,
            head_dim_k: head_dim,
            head_dim_v: head_dim,
            kq_scale: 0.125,
            softcap: 0.0,
        }
    }

    /// A row's list of cells is checked where it is made: strictly ascending, or a clear panic
    /// (the tiles take it as it is). Panics as `should_panic` tests, not `catch_unwind`: the
    /// aarch64 test build's library aborts on a panic (scripts/aarch64-test.sh).
    #[test]
    fn visible_cells_take_ascending_lists() {
        assert_eq!(Visible::new(&[]).cells(), &[] as &[u32]);
        assert_eq!(Visible::new(&[3, 7, 64]).cells(), &[3, 7, 64]);
    }

    #[test]
    #[should_panic(expected = "visible cells ascending")]
    fn visible_cells_refuse_a_repeated_cell() {
        Visible::new(&[0, 2, 2]);
    }

    #[test]
    #[should_panic(expected = "visible cells ascending")]
    fn visible_cells_refuse_a_cell_out_of_order() {
        Visible::new(&[0, 1, 2, 3, 4, 5, 6, 7, 9, 8]);
    }

    /// A sequence's keys and values in other cells (further on in the cache, or every other cell,
    /// as when requests interleave) give the same bits: the blocks of cells only shape the work.
    #[test]
    fn outputs_do_not_depend_on_the_cells() {
        let mut seed = 13;
        let (ty, dk, nh, nkv, n) = (GgmlType::F16, 64, 6, 2, 150);
        let shape = plain_shape(nh, nkv, dk);
        // The sequence's rows, token by token, each head's keys (values) of one token together.
        let (ks, vs) = (random(n * nkv * dk, &mut seed), random(n * nkv * dk, &mut seed));
        let qs: Vec<Vec<f32>> = (0..9).map(|_| random(nh * dk, &mut seed)).collect();
        let tokens: Vec<usize> = (n - 9..n).collect();
        // Token j in cell `place(j)` of a cache of `n_cells`, head-major.
        let run = |isa: Isa, n_cells: usize, place: &dyn Fn(usize) -> usize| {
            let head = ty.row_bytes(dk as u64).unwrap() as usize;
            let (mut kb, mut vb) = (vec![0u8; nkv * n_cells * head], vec![0u8; nkv * n_cells * head]);
            for j in 0..n {
                for h in 0..nkv {
                    let at = (h * n_cells + place(j)) * head;
                    let from = (j * nkv + h) * dk..(j * nkv + h + 1) * dk;
                    quantize_row(ty, &ks[from.clone()], &mut kb[at..at + head]);
                    quantize_row(ty, &vs[from], &mut vb[at..at + head]);
                }
            }
            let visible: Vec<Vec<u32>> = tokens
                .iter()
                .map(|&t| (0..=t).map(|j| place(j) as u32).collect())
                .collect();
            tiled(
                isa,
                &qs,
                KvView { ty, k: &kb, v: &vb },
                &visible,
                &shape,
                TILE_ROWS,
            )
        };
        let want = run(Isa::Scalar, n, &|j| j);
        for isa in Isa::supported() {
            for (what, n_cells, place) in [
                ("in place", n, &(|j| j) as &dyn Fn(usize) -> usize),
                ("5 cells on", n + 5, &|j| j + 5),
                ("63 cells on", n + 63, &|j| j + 63),
                ("every other cell", 2 * n + 1, &|j| 2 * j + 1),
            ] {
                let got = run(isa, n_cells, place);
                assert!(
                    got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{isa}, {what}"
                );
            }
        }
    }

    /// A decode step (one row, tiles of one query head or of a KV head's group) gives the bits of
    /// the same row in a batch, on a long context.
    #[test]
    fn decode_matches_batch_rows() {
        let mut seed = 11;
        let (ty, dk, nh, nkv, n_cells) = (GgmlType::F16, 64, 8, 2, 700);
        let row = ty.row_bytes((nkv * dk) as u64).unwrap() as usize;
        let mut kb = vec![0u8; n_cells * row];
        let mut vb = vec![0u8; n_cells * row];
        quantize_row(ty, &random(n_cells * nkv * dk, &mut seed), &mut kb);
        quantize_row(ty, &random(n_cells * nkv * dk, &mut seed), &mut vb);
        let kv = KvView { ty, k: &kb, v: &vb };
        let shape = plain_shape(nh, nkv, dk);
        let visible: Vec<Vec<u32>> = (n_cells - 8..n_cells).map(|t| (0..=t as u32).collect()).collect();
        let qs: Vec<Vec<f32>> = visible.iter().map(|_| random(nh * dk, &mut seed)).collect();
        let isa = Isa::active();
        let batch = tiled(isa, &qs, kv, &visible, &shape, TILE_ROWS);
        let mut scratch = TileScratch::default();
        for (r, (q, cells)) in qs.iter().zip(&visible).enumerate() {
            let mut out = vec![0f32; nh * dk];
            for h in 0..nh {
                let mut slot = Some(&mut out[h * dk..(h + 1) * dk]);
                attend_tile_isa(
                    isa,
                    &[q],
                    kv,
                    &[Visible::new(cells)],
                    &shape,
                    h..h + 1,
                    &mut scratch,
                    |_, _| slot.take().expect("one output"),
                );
            }
            assert_eq!(out, batch[r * nh * dk..(r + 1) * nh * dk], "row {r}");
        }
    }
}
