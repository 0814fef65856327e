//! Kernels of the attention step over a block of KV cells, with the queries of a tile in SIMD
//! lanes: scores as an f32 micro-GEMM (queries x cells; for a decode step's few queries, cells in
//! the AVX-512 lanes, or two cells' queries), the softmax's maximum, weights and sums with a
//! vectorized exp, and the weighted sum of the value rows.
//!
//! Every tier performs, per query and per output value, the same IEEE operations in the same order
//! as the scalar code here (each score is a chain of fused multiply-adds over the head dimension in
//! index order; each output value a chain of fused multiply-adds over the cells in ascending order;
//! [`exp_neg`](super::exp::exp_neg) is a polynomial of fused multiply-adds), so the tiers give the same bits, and a
//! query gives the same bits whatever tile it is evaluated in.
//!
//! Layouts: `qt[d * nqp + i]` is value `d` of query `i` (transposed, `nqp` from
//! [`padded_queries`], padding queries zero); `k[c * dk + d]` / `v[c * dvp + e]` the f32 key /
//! value rows of the block's cells (`dvp` a multiple of [`LANES`]; keys may come two cells
//! interleaved instead, [`pair_rows`]); `s[c * nqp + i]` the scores or weights.

#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use super::exp::exp_neg;
use super::Isa;

/// Queries are padded to a multiple of this many lanes (one AVX-512 vector, two AVX2 ones).
pub const LANES: usize = 16;

/// Query lanes for a tile of `nq` queries: 8 for at most 8 (a decode step's heads of one KV
/// head: Gemma 3 has 4, Qwen2.5 0.5B 7, Llama 2/TinyLlama 8), which the AVX-512 tier then runs
/// two cells to a vector (scores and weights) or on the AVX2 kernels' 8-lane vectors (the same
/// bits) instead of computing 16 lanes, half or more of them padding; otherwise a multiple of
/// [`LANES`].
pub fn padded_queries(nq: usize) -> usize {
    if nq <= LANES / 2 {
        LANES / 2
    } else {
        nq.div_ceil(LANES) * LANES
    }
}

/// The tier that runs a lane-wise kernel on `nqp` query lanes: AVX-512's kernels step 16 lanes.
fn lane_tier(isa: Isa, nqp: usize) -> Isa {
    if matches!(isa, Isa::Avx512 | Isa::Amx) && !nqp.is_multiple_of(LANES) {
        Isa::Avx2
    } else {
        isa
    }
}

/// Most queries a tile may have for the AVX-512 tier to put cells, not queries, in its lanes.
const CELL_LANES_MAX_QUERIES: usize = 4;

/// `s[c * nqp + i] = sum_d qt[d * nqp + i] * k[c * dk + d]` for `nc` cells (fused multiply-adds in
/// `d` order from 0). Queries `nq..nqp` are padding, zero in `qt`: their scores are 0. With
/// `paired` (only where [`pairs_layout`] holds) the keys of the first [`paired_cells`] cells are
/// in [`pair_rows`]' layout, the rest in rows.
///
/// With queries in lanes, a decode step's few queries (Gemma 3 splits its 4 heads of one KV
/// head over two threads) leave most of every vector's lanes padding; with at most
/// [`CELL_LANES_MAX_QUERIES`] the AVX-512 tier puts 16 cells in the lanes instead (their key rows
/// transposed in registers), and with up to 8 two cells' 8 query lanes (their key rows
/// interleaved), with the same chain of multiply-adds per score. Single-thread decode attention
/// at 4096 cells (`attn_bench`, F16 cache, 5 alternated pairs), two cells per vector for scores
/// and weights against 8-lane AVX2 vectors: Qwen2.5 0.5B's 14/2 heads 5.15 -> 4.40 ms per
/// token, TinyLlama's 32/4 8.95 -> 8.0. An F16 cache's keys come paired from their conversion
/// ([`f16_key_pairs`]), which saves the kernel loading, interleaving and storing each key again:
/// Qwen2.5 0.5B 4.53 / 4.43 / 4.54 -> 3.71 / 3.86 / 3.90 ms, TinyLlama 8.10 / 8.24 / 8.14 ->
/// 7.01 / 7.26 / 7.05 (median of 20, alternated runs).
#[allow(clippy::too_many_arguments)]
pub fn scores(
    isa: Isa,
    qt: &[f32],
    nqp: usize,
    nq: usize,
    k: &[f32],
    dk: usize,
    nc: usize,
    paired: bool,
    s: &mut [f32],
) {
    assert!(
        nqp.is_multiple_of(LANES / 2) && nq <= nqp && s.len() >= nc * nqp,
        "attn: score block layout"
    );
    assert!(qt.len() >= dk * nqp && k.len() >= nc * dk, "attn: scores sizes");
    assert!(
        !paired || pairs_layout(isa, nq, nqp, dk),
        "attn: paired keys on {isa}"
    );
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx512 | Isa::Amx) && nq <= CELL_LANES_MAX_QUERIES && dk.is_multiple_of(16) {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        let done =
            unsafe { x86::scores_cell_lanes(qt.as_ptr(), nqp, nq, k.as_ptr(), dk, nc, s.as_mut_ptr()) };
        let (k, s) = (&k[done * dk..], &mut s[done * nqp..]);
        return scores(Isa::Avx2, qt, nqp, nq, k, dk, nc - done, false, s);
    }
    #[cfg(target_arch = "x86_64")]
    if pairs_layout(isa, nq, nqp, dk) {
        // SAFETY: `pairs_layout` holds (AVX-512, the active tier; 8 query lanes; `dk` a multiple
        // of 16), and the sizes are checked above.
        let done = unsafe { x86::scores_cell_pairs(qt.as_ptr(), k.as_ptr(), dk, nc, paired, s.as_mut_ptr()) };
        let (k, s) = (&k[done * dk..], &mut s[done * nqp..]);
        return scores(Isa::Avx2, qt, nqp, nq, k, dk, nc - done, false, s);
    }
    match lane_tier(isa, nqp) {
        // SAFETY: the tier is supported (the active one, or AVX2 under AVX-512), and the sizes
        // are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe {
            x86::scores_avx512(qt.as_ptr(), nqp, k.as_ptr(), dk, nc, s.as_mut_ptr())
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe {
            x86::scores_avx2(qt.as_ptr(), nqp, k.as_ptr(), dk, nc, s.as_mut_ptr())
        },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::scores(qt.as_ptr(), nqp, k.as_ptr(), dk, nc, s.as_mut_ptr()) },
        _ => {
            for c in 0..nc {
                let kr = &k[c * dk..(c + 1) * dk];
                for i in 0..nqp {
                    let mut acc = 0f32;
                    for (d, &kv) in kr.iter().enumerate() {
                        acc = qt[d * nqp + i].mul_add(kv, acc);
                    }
                    s[c * nqp + i] = acc;
                }
            }
        }
    }
}

/// Whether [`scores_f16`] takes f16 key rows as they are on `isa`, for `nq` queries of `dk`
/// values: the AVX-512 tier with cells in lanes ([`scores`]).
pub fn keys_from_f16(isa: Isa, nq: usize, dk: usize) -> bool {
    matches!(isa, Isa::Avx512 | Isa::Amx) && nq <= CELL_LANES_MAX_QUERIES && dk.is_multiple_of(16)
}

/// [`scores`] of the whole groups of 16 of `nc` cells from f16 key rows (`k16`: `dk`
/// little-endian f16 values per cell) converted in registers, where [`keys_from_f16`] holds:
/// the same bits. Returns how many cells it did; the rest (fewer than 16) go through [`scores`]
/// converted first. Asks for the bytes `ahead` further on as it goes (the same cells of the next
/// block; 0: not), which only hints the cache: any distance is safe. Decode attention of Gemma 3
/// (4 queries of 256 per KV head), 2048 cells in cache on one thread: 0.078 ms converting the
/// keys first, 0.041 ms so.
#[allow(clippy::too_many_arguments)]
pub fn scores_f16(
    isa: Isa,
    qt: &[f32],
    nqp: usize,
    nq: usize,
    k16: &[u8],
    dk: usize,
    nc: usize,
    ahead: usize,
    s: &mut [f32],
) -> usize {
    assert!(keys_from_f16(isa, nq, dk), "attn: f16 keys on {isa}");
    assert!(
        nqp.is_multiple_of(LANES / 2) && nq <= nqp && qt.len() >= dk * nqp,
        "attn: score block layout"
    );
    assert!(
        k16.len() >= 2 * nc * dk && s.len() >= nc * nqp,
        "attn: scores sizes"
    );
    // SAFETY: the tier is the active one (`keys_from_f16`: AVX-512, supported), and the sizes are
    // checked above; the look-ahead only prefetches.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        x86::scores_cell_lanes_f16(qt.as_ptr(), nqp, nq, k16.as_ptr(), dk, nc, ahead, s.as_mut_ptr())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (qt, nqp, nq, k16, dk, nc, ahead, s);
        unreachable!("f16 keys only on x86 tiers");
    }
}

/// `s = s * f` per value: a block's scores times the attention's scale (one rounding per value, so
/// every tier gives the scalar code's bits). The scalar loop builds for baseline x86-64 (4 lanes);
/// a prompt's tiles scale every score they compute.
pub fn scale(isa: Isa, s: &mut [f32], f: f32) {
    let done = match isa {
        // SAFETY: the tier is the active one (supported); the kernels stay inside `s`.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe { x86::scale_avx512(s.as_mut_ptr(), s.len(), f) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe { x86::scale_avx2(s.as_mut_ptr(), s.len(), f) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::scale(s.as_mut_ptr(), s.len(), f) },
        _ => 0,
    };
    s[done..].iter_mut().for_each(|x| *x *= f);
}

/// The running maximum score of each query lane: `m = max(m, s_c)` over the block's `nc` cells.
/// A maximum is exact, so it does not depend on how the cells are split into blocks.
pub fn block_max(isa: Isa, s: &[f32], nqp: usize, nc: usize, m: &mut [f32]) {
    assert!(nqp.is_multiple_of(LANES / 2) && s.len() >= nc * nqp && m.len() >= nqp);
    match lane_tier(isa, nqp) {
        // SAFETY: the tier is supported (the active one, or AVX2 under AVX-512), and the sizes
        // are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe { x86::max_avx512(s.as_ptr(), nqp, nc, m.as_mut_ptr()) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe { x86::max_avx2(s.as_ptr(), nqp, nc, m.as_mut_ptr()) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::max(s.as_ptr(), nqp, nc, m.as_mut_ptr()) },
        _ => {
            for row in s[..nc * nqp].chunks_exact(nqp) {
                for (m, &x) in m[..nqp].iter_mut().zip(row) {
                    *m = m.max(x);
                }
            }
        }
    }
}

/// Softmax weights before normalization, in place: `s = e^(s - m)` per lane, rounded to f16 (and
/// back) when `round_f16` (as llama.cpp weights an F16 value cache), each added to the lane's sum
/// `l` in cell order. With `m` the final maximum (a first pass), the sums and the weighted values
/// are then one chain of additions per query in cell order, the same bits however the cells are
/// split into blocks.
pub fn weights(isa: Isa, s: &mut [f32], nqp: usize, nc: usize, m: &[f32], l: &mut [f32], round_f16: bool) {
    assert!(nqp.is_multiple_of(LANES / 2) && s.len() >= nc * nqp && m.len() >= nqp && l.len() >= nqp);
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx512 | Isa::Amx) && nqp == LANES / 2 {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        let done =
            unsafe { x86::weights_cell_pairs(s.as_mut_ptr(), nc, m.as_ptr(), l.as_mut_ptr(), round_f16) };
        return weights(Isa::Avx2, &mut s[done * nqp..], nqp, nc - done, m, l, round_f16);
    }
    match lane_tier(isa, nqp) {
        // SAFETY: the tier is supported (the active one, or AVX2 under AVX-512), and the sizes
        // are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe {
            x86::weights_avx512(s.as_mut_ptr(), nqp, nc, m.as_ptr(), l.as_mut_ptr(), round_f16)
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe {
            x86::weights_avx2(s.as_mut_ptr(), nqp, nc, m.as_ptr(), l.as_mut_ptr(), round_f16)
        },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::weights(s.as_mut_ptr(), nqp, nc, m.as_ptr(), l.as_mut_ptr(), round_f16) },
        _ => {
            for row in s[..nc * nqp].chunks_exact_mut(nqp) {
                for ((x, &m), l) in row.iter_mut().zip(m).zip(l.iter_mut()) {
                    *x = weight(*x, m, round_f16);
                    *l += *x;
                }
            }
        }
    }
}

/// The weight of one score before normalization (what [`weights`] computes per lane).
#[inline]
pub fn weight(s: f32, m: f32, round_f16: bool) -> f32 {
    let p = exp_neg(s - m);
    if round_f16 {
        half::f16::from_f32(p).to_f32()
    } else {
        p
    }
}

/// Where [`weighted_values`] keeps the sum of value `e` of query `i`, for `nqp` query lanes and
/// `dvp` values on a tier: by query, `acc[i * dvp + e]` (a query's values in SIMD lanes, for the
/// few queries of a decode step); or, on AVX-512 with a multiple of 16 query lanes (a prompt's
/// tile), by value, `acc[e * nqp + i]`: queries in lanes, so the weighted sum is a micro-GEMM like
/// [`scores`], one broadcast value serving 16 queries and a cell's zero weights one mask per 16
/// queries (by query, every query took a mask and a broadcast of its own per cell).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccLayout {
    by_value: bool,
    nqp: usize,
    dvp: usize,
}

impl AccLayout {
    pub fn new(isa: Isa, nqp: usize, dvp: usize) -> AccLayout {
        AccLayout {
            by_value: matches!(isa, Isa::Avx512 | Isa::Amx) && nqp.is_multiple_of(LANES),
            nqp,
            dvp,
        }
    }

    /// Whether the sums are by value, `acc[e * nqp + i]`.
    pub fn by_value(&self) -> bool {
        self.by_value
    }

    /// How many accumulators there are (padding queries included).
    pub fn size(&self) -> usize {
        self.nqp * self.dvp
    }

    /// The index of value `e` of query `i`.
    #[inline]
    pub fn at(&self, i: usize, e: usize) -> usize {
        if self.by_value {
            e * self.nqp + i
        } else {
            i * self.dvp + e
        }
    }
}

/// Whether [`scores`] takes a block's keys paired ([`pair_rows`]' layout for its whole groups of
/// 16 cells): the AVX-512 tier's layout for 5 to 8 queries (8 query lanes, two cells to a vector),
/// for `dk` a multiple of 16.
pub fn pairs_layout(isa: Isa, nq: usize, nqp: usize, dk: usize) -> bool {
    matches!(isa, Isa::Avx512 | Isa::Amx)
        && nq > CELL_LANES_MAX_QUERIES
        && nqp == LANES / 2
        && dk.is_multiple_of(16)
}

/// The cells of a block of `nc` whose keys are paired (the whole groups of 16).
pub fn paired_cells(nc: usize) -> usize {
    nc / 16 * 16
}

/// Rows of `dk` values two by two with each pair interleaved: cell `2p`'s value `d` at
/// `dst[2p * dk + 2d]`, cell `2p + 1`'s next to it (the reference for [`f16_key_pairs`]).
pub fn pair_rows(src: &[f32], dk: usize, dst: &mut [f32]) {
    assert!(
        src.len() == dst.len() && src.len().is_multiple_of(2 * dk),
        "attn: pair sizes"
    );
    for (s, d) in src.chunks_exact(2 * dk).zip(dst.chunks_exact_mut(2 * dk)) {
        for e in 0..dk {
            d[2 * e] = s[e];
            d[2 * e + 1] = s[dk + e];
        }
    }
}

/// Key rows of f16 values (`dk` each, an even number of them) converted to f32 and paired as
/// [`pair_rows`] pairs them (exact on every tier).
pub fn f16_key_pairs(isa: Isa, src: &[u8], dk: usize, dst: &mut [f32]) {
    assert!(
        src.len() == 2 * dst.len() && dst.len().is_multiple_of(2 * dk),
        "attn: f16 pair sizes"
    );
    if matches!(isa, Isa::Avx512 | Isa::Amx) && dk.is_multiple_of(16) {
        // SAFETY: the tier is the active one (supported), `dk` a multiple of 16 and the sizes
        // are checked above.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            x86::f16_key_pairs_avx512(src.as_ptr(), dk, dst.len() / (2 * dk), dst.as_mut_ptr());
            return;
        }
    }
    // The other tiers (only their tests pair keys): convert, then pair.
    let mut rows = vec![0f32; dst.len()];
    f16_row(isa, src, &mut rows);
    pair_rows(&rows, dk, dst);
}

/// `acc[at(i, e)] += p[c * nqp + i] * v[c * dvp + e]` for the first `nq` queries (or all `nqp`),
/// over the `nc` cells in ascending order (fused multiply-adds), skipping zero weights; `at` is
/// [`AccLayout::new`]`(isa, nqp, dvp)`'s.
#[allow(clippy::too_many_arguments)]
pub fn weighted_values(
    isa: Isa,
    p: &[f32],
    nqp: usize,
    nq: usize,
    v: &[f32],
    dvp: usize,
    nc: usize,
    acc: &mut [f32],
) {
    let layout = AccLayout::new(isa, nqp, dvp);
    assert!(dvp.is_multiple_of(LANES) && nq <= nqp);
    assert!(p.len() >= nc * nqp && v.len() >= nc * dvp && acc.len() >= layout.size());
    match isa {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx if layout.by_value => unsafe {
            x86::values_by_value_avx512(p.as_ptr(), nqp, v.as_ptr(), dvp, nc, acc.as_mut_ptr())
        },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe {
            x86::values_avx512(p.as_ptr(), nqp, nq, v.as_ptr(), dvp, nc, acc.as_mut_ptr())
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe {
            x86::values_avx2(p.as_ptr(), nqp, nq, v.as_ptr(), dvp, nc, acc.as_mut_ptr())
        },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::values(p.as_ptr(), nqp, nq, v.as_ptr(), dvp, nc, acc.as_mut_ptr()) },
        _ => {
            for (i, a) in acc[..nq * dvp].chunks_exact_mut(dvp).enumerate() {
                for c in 0..nc {
                    let w = p[c * nqp + i];
                    if w != 0.0 {
                        for (x, &y) in a.iter_mut().zip(&v[c * dvp..(c + 1) * dvp]) {
                            *x = w.mul_add(y, *x);
                        }
                    }
                }
            }
        }
    }
}

/// Whether [`weighted_values_f16`] takes f16 value rows on `isa` for `nqp` query lanes and `dv`
/// values: AVX-512 with the sums by query (a decode step's 8 lanes), `dv` a multiple of
/// [`LANES`].
pub fn values_from_f16(isa: Isa, nqp: usize, dv: usize) -> bool {
    matches!(isa, Isa::Avx512 | Isa::Amx)
        && dv.is_multiple_of(LANES)
        && !AccLayout::new(isa, nqp, dv).by_value
}

/// [`weighted_values`] from f16 value rows converted as they are loaded, not into a block of f32
/// first (the same bits), where [`values_from_f16`] holds: `nc` rows of `dv` little-endian f16
/// values, `stride` values apart from the start of `v` (`dv` for whole rows; a split decode step
/// takes some of each row's values, [`crate::ops::attention::split_sums`]). A decode step's
/// weighted values were load and store bound: the conversion stored every value row once more
/// and the sums loaded it again.
#[allow(clippy::too_many_arguments)]
pub fn weighted_values_f16(
    isa: Isa,
    p: &[f32],
    nqp: usize,
    nq: usize,
    v: &[u8],
    (stride, dv): (usize, usize),
    nc: usize,
    acc: &mut [f32],
) {
    assert!(values_from_f16(isa, nqp, dv), "attn: f16 value rows on {isa}");
    assert!(stride >= dv, "attn: value rows overlap");
    let rows_len = if nc == 0 { 0 } else { 2 * ((nc - 1) * stride + dv) };
    assert!(nq <= nqp && p.len() >= nc * nqp && v.len() >= rows_len && acc.len() >= nqp * dv);
    // SAFETY: the tier is the active one (`values_from_f16`: AVX-512, supported) and the sizes
    // are checked above.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        x86::values_f16_avx512(p.as_ptr(), nqp, nq, v.as_ptr(), stride, dv, nc, acc.as_mut_ptr())
    }
}

/// `dst[c * rows + r] = src[r * cols + c]` (exact on every tier): a tile's queries into
/// [`scores`]' layout, and [`AccLayout`]'s sums by value back to rows by query. AVX-512 moves 16 x
/// 16 blocks through registers, AVX2 8 x 8 ones; the rest goes one value at a time.
pub fn transpose(isa: Isa, src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    assert!(
        src.len() >= rows * cols && dst.len() >= rows * cols,
        "attn: transpose sizes"
    );
    let block = match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => 16,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => 8,
        _ => 0,
    };
    let (rb, cb) = match block {
        0 => (0, 0),
        b => (rows / b * b, cols / b * b),
    };
    #[cfg(target_arch = "x86_64")]
    if block > 0 {
        for r0 in (0..rb).step_by(block) {
            for c0 in (0..cb).step_by(block) {
                let (src, dst) = (src[r0 * cols + c0..].as_ptr(), dst[c0 * rows + r0..].as_mut_ptr());
                // SAFETY: the tier is supported (a tier is only used where it is), and the block's
                // rows and columns are inside both slices (sizes checked above).
                unsafe {
                    if block == 16 {
                        x86::transpose16_avx512(src, cols, dst, rows)
                    } else {
                        x86::transpose8_avx2(src, cols, dst, rows)
                    }
                }
            }
        }
    }
    for r in 0..rows {
        let from = if r < rb { cb } else { 0 };
        for c in from..cols {
            dst[c * rows + r] = src[r * cols + c];
        }
    }
}

/// Asks the core to bring the cache lines of `bytes` into L2 (a hint: no effect on any result;
/// nothing on other architectures). The KV cache of a long context comes from memory each token
/// (the weights streamed through since evict it), and rows converted one at a time leave the
/// core waiting on each; asking for rows further on overlaps those reads.
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        let start = bytes.as_ptr() as usize;
        let mut line = start & !63;
        while line < start + bytes.len() {
            // SAFETY: a prefetch never faults, and SSE is part of x86-64.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(line as *const i8) };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Converts a row of little-endian f16 values to f32 (exact on every tier).
pub fn f16_row(isa: Isa, src: &[u8], dst: &mut [f32]) {
    assert!(src.len() >= 2 * dst.len(), "attn: f16 row too short");
    let done = match isa {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe { x86::f16_row_avx512(src.as_ptr(), dst.as_mut_ptr(), dst.len()) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe { x86::f16_row(src.as_ptr(), dst.as_mut_ptr(), dst.len()) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::f16_row(src.as_ptr(), dst.as_mut_ptr(), dst.len()) },
        _ => 0,
    };
    for (d, b) in dst[done..].iter_mut().zip(src[2 * done..].chunks_exact(2)) {
        *d = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

/// Q8_0 blocks (a Q8_0 KV cache's rows) to f32: `dst.len()` values, a whole number of blocks.
/// Every value is `q · d` with `d` an f16, exact in f32, so every tier gives the scalar code's
/// (and `quant::dequantize_row`'s) bits.
pub fn q8_0_row(isa: Isa, src: &[u8], dst: &mut [f32]) {
    assert!(
        dst.len().is_multiple_of(32) && src.len() >= dst.len() / 32 * 34,
        "attn: q8_0 row too short"
    );
    let blocks = dst.len() / 32;
    match isa {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => unsafe { x86::q8_0_row_avx512(src.as_ptr(), dst.as_mut_ptr(), blocks) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => unsafe { x86::q8_0_row(src.as_ptr(), dst.as_mut_ptr(), blocks) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::q8_0_row(src.as_ptr(), dst.as_mut_ptr(), blocks) },
        _ => crate::quant::dequantize_row(crate::quant::GgmlType::Q8_0, &src[..blocks * 34], dst)
            .expect("whole Q8_0 blocks, checked above"),
    }
}

/// The kernels written once for every SIMD tier, over a [`lanes::Lanes`] vector type.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod lanes {
    /// One tier's vector of f32 lanes, for the kernels below, which are written once for every
    /// tier: the same operations per lane, so every tier gives the scalar code's bits.
    pub(super) trait Lanes: Copy {
        const W: usize;
        unsafe fn zero() -> Self;
        unsafe fn splat(x: f32) -> Self;
        unsafe fn load(p: *const f32) -> Self;
        unsafe fn store(self, p: *mut f32);
        /// `a * b + c`, fused.
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self;
        unsafe fn add(self, o: Self) -> Self;
        unsafe fn sub(self, o: Self) -> Self;
        unsafe fn mul(self, o: Self) -> Self;
        unsafe fn max(self, o: Self) -> Self;
        /// [`crate::kernels::exp::exp_neg`] per lane.
        unsafe fn exp_neg(self) -> Self;
        /// Rounded to f16 and back.
        unsafe fn round_f16(self) -> Self;
        /// `W` f16 values (little-endian, at `p`) in f32, exactly. One at a time here; the tiers
        /// that take f16 value rows ([`super::values_from_f16`]) convert a vector at once.
        #[inline(always)]
        unsafe fn load_f16(p: *const u8) -> Self {
            let mut x = [0f32; 16];
            for (i, x) in x.iter_mut().take(Self::W).enumerate() {
                *x = half::f16::from_bits((p.add(2 * i) as *const u16).read_unaligned()).to_f32();
            }
            Self::load(x.as_ptr())
        }
        /// Bit `q` set where `w[q] != 0.0`, for `q < Q` (the scalar code's test: NaN counts
        /// as live).
        #[inline(always)]
        unsafe fn live<const Q: usize>(w: *const f32) -> u32 {
            (0..Q).fold(0u32, |m, q| m | u32::from(*w.add(q) != 0.0) << q)
        }
        /// `a * b + c` if `on`, else `c`.
        #[inline(always)]
        unsafe fn fmadd_if(on: bool, a: Self, b: Self, c: Self) -> Self {
            if on {
                Self::fmadd(a, b, c)
            } else {
                c
            }
        }
    }

    /// Scores of query vectors `j..j + Q` (of `V::W` lanes) x cells `c..c + CC`.
    #[inline(always)]
    unsafe fn scores_tile<V: Lanes, const Q: usize, const CC: usize>(
        qt: *const f32,
        nqp: usize,
        k: *const f32,
        dk: usize,
        s: *mut f32,
        j: usize,
        c: usize,
    ) {
        let mut acc = [[V::zero(); CC]; Q];
        for d in 0..dk {
            let mut q = [V::zero(); Q];
            for (a, q) in q.iter_mut().enumerate() {
                *q = V::load(qt.add(d * nqp + j + V::W * a));
            }
            for b in 0..CC {
                let kv = V::splat(*k.add((c + b) * dk + d));
                for a in 0..Q {
                    acc[a][b] = V::fmadd(q[a], kv, acc[a][b]);
                }
            }
        }
        for a in 0..Q {
            for b in 0..CC {
                acc[a][b].store(s.add((c + b) * nqp + j + V::W * a));
            }
        }
    }

    #[inline(always)]
    unsafe fn scores_q<V: Lanes, const Q: usize>(
        qt: *const f32,
        nqp: usize,
        k: *const f32,
        dk: usize,
        nc: usize,
        s: *mut f32,
        j: usize,
    ) {
        let mut c = 0;
        // One query vector (decode, a few heads per KV head) has eight cells' chains of
        // multiply-adds in flight: four would wait on the FMA latency.
        while Q == 1 && c + 8 <= nc {
            scores_tile::<V, 1, 8>(qt, nqp, k, dk, s, j, c);
            c += 8;
        }
        while c + 4 <= nc {
            scores_tile::<V, Q, 4>(qt, nqp, k, dk, s, j, c);
            c += 4;
        }
        while c < nc {
            scores_tile::<V, Q, 1>(qt, nqp, k, dk, s, j, c);
            c += 1;
        }
    }

    /// Up to `QMAX` query vectors at a time (as many as the tier's registers hold with 4 cells).
    #[inline(always)]
    pub(super) unsafe fn scores<V: Lanes, const QMAX: usize>(
        qt: *const f32,
        nqp: usize,
        k: *const f32,
        dk: usize,
        nc: usize,
        s: *mut f32,
    ) {
        let mut j = 0;
        while j < nqp {
            let q = ((nqp - j) / V::W).min(QMAX);
            match q {
                1 => scores_q::<V, 1>(qt, nqp, k, dk, nc, s, j),
                2 => scores_q::<V, 2>(qt, nqp, k, dk, nc, s, j),
                3 => scores_q::<V, 3>(qt, nqp, k, dk, nc, s, j),
                _ => scores_q::<V, 4>(qt, nqp, k, dk, nc, s, j),
            }
            j += q * V::W;
        }
    }

    /// [`super::scale`] of the whole vectors of `n` values at `s`; returns how many it did.
    #[inline(always)]
    pub(super) unsafe fn scale<V: Lanes>(s: *mut f32, n: usize, f: f32) -> usize {
        let (fv, done) = (V::splat(f), n / V::W * V::W);
        for i in (0..done).step_by(V::W) {
            V::load(s.add(i)).mul(fv).store(s.add(i));
        }
        done
    }

    #[inline(always)]
    pub(super) unsafe fn maxes<V: Lanes>(s: *const f32, nqp: usize, nc: usize, m: *mut f32) {
        for j in (0..nqp).step_by(V::W) {
            let mut mv = V::load(m.add(j));
            for c in 0..nc {
                mv = mv.max(V::load(s.add(c * nqp + j)));
            }
            mv.store(m.add(j));
        }
    }

    #[inline(always)]
    pub(super) unsafe fn weights<V: Lanes>(
        s: *mut f32,
        nqp: usize,
        nc: usize,
        m: *const f32,
        l: *mut f32,
        round_f16: bool,
    ) {
        for j in (0..nqp).step_by(V::W) {
            let (mv, mut lv) = (V::load(m.add(j)), V::load(l.add(j)));
            for c in 0..nc {
                let p = s.add(c * nqp + j);
                let mut w = V::load(p).sub(mv).exp_neg();
                if round_f16 {
                    w = w.round_f16();
                }
                w.store(p);
                lv = lv.add(w);
            }
            lv.store(l.add(j));
        }
    }

    /// Queries `i..i + Q` x values `e0..e0 + V::W * E` over the cells `live` lists (cell index
    /// in the high 16 bits, the queries' live bits in the low 16, cells ascending; `Q <= 16`):
    /// each cell's value vectors are loaded once for the `Q` queries (from f32 rows, or from f16
    /// rows with `F16`, converted as they are loaded). Per query and value, the
    /// same fused multiply-adds as the scalar code, in the same order, zero weights skipped.
    #[inline(always)]
    unsafe fn values_tile<V: Lanes, const Q: usize, const E: usize, const F16: bool>(
        p: *const f32,
        nqp: usize,
        i: usize,
        v: *const u8,
        vs: usize,
        dvp: usize,
        live: &[u32],
        acc: *mut f32,
        e0: usize,
    ) {
        let mut a = [[V::zero(); E]; Q];
        for (q, a) in a.iter_mut().enumerate() {
            for (x, a) in a.iter_mut().enumerate() {
                *a = V::load(acc.add((i + q) * dvp + e0 + V::W * x));
            }
        }
        for &cl in live {
            let c = (cl >> 16) as usize;
            let w = p.add(c * nqp + i);
            let mut vv = [V::zero(); E];
            for (x, vv) in vv.iter_mut().enumerate() {
                let at = c * vs + e0 + V::W * x;
                *vv = if F16 {
                    V::load_f16(v.add(2 * at))
                } else {
                    V::load((v as *const f32).add(at))
                };
            }
            for q in 0..Q {
                let wv = V::splat(*w.add(q));
                let on = cl >> q & 1 != 0;
                for x in 0..E {
                    a[q][x] = V::fmadd_if(on, wv, vv[x], a[q][x]);
                }
            }
        }
        for q in 0..Q {
            for x in 0..E {
                a[q][x].store(acc.add((i + q) * dvp + e0 + V::W * x));
            }
        }
    }

    /// Queries `i..i + Q` over all values, 64 cells at a time: first the cells where some of
    /// the queries' weights are not zero (with which), then the values in chunks of up to 4
    /// vectors over those cells (`dvp` is a multiple of 16, so AVX2 takes chunks of 4 or 2), or 2
    /// for more than 4 queries (their sums then fill 16 registers).
    /// Listing the cells first takes the data-dependent branch out of the multiply-add loop:
    /// with a long context many weights underflow to zero, in no pattern a predictor follows.
    #[inline(always)]
    unsafe fn values_rows<V: Lanes, const Q: usize, const F16: bool>(
        p: *const f32,
        nqp: usize,
        i: usize,
        v: *const u8,
        vs: usize,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        const CHUNK: usize = 64;
        let mut live = [0u32; CHUNK];
        for c0 in (0..nc).step_by(CHUNK) {
            let mut n = 0;
            for c in c0..(c0 + CHUNK).min(nc) {
                let bits = V::live::<Q>(p.add(c * nqp + i));
                live[n] = ((c - c0) as u32) << 16 | bits;
                n += usize::from(bits != 0);
            }
            let live = &live[..n];
            let (p, v) = (p.add(c0 * nqp), v.add(c0 * vs * if F16 { 2 } else { 4 }));
            let mut e0 = 0;
            while e0 < dvp {
                let e = ((dvp - e0) / V::W).min(if Q > 4 { 2 } else { 4 });
                match e {
                    1 => values_tile::<V, Q, 1, F16>(p, nqp, i, v, vs, dvp, live, acc, e0),
                    2 => values_tile::<V, Q, 2, F16>(p, nqp, i, v, vs, dvp, live, acc, e0),
                    3 => values_tile::<V, Q, 3, F16>(p, nqp, i, v, vs, dvp, live, acc, e0),
                    _ => values_tile::<V, Q, 4, F16>(p, nqp, i, v, vs, dvp, live, acc, e0),
                }
                e0 += e * V::W;
            }
        }
    }

    /// `QV` queries share each cell's value loads (as many as the tier's registers hold). The
    /// value rows are f32, or f16 with `F16`, `vs` values apart (`dvp` of each read).
    #[inline(always)]
    pub(super) unsafe fn values<V: Lanes, const QV: usize, const F16: bool>(
        p: *const f32,
        nqp: usize,
        nq: usize,
        v: *const u8,
        vs: usize,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        // AVX-512 takes a decode step's 5 to 8 queries in one group, on half as many values at
        // a time: each cell's list entry is made once and each value row converted once.
        // Single-thread decode attention at 4096 cells (`attn_bench`, Qwen2.5 0.5B's 14/2 heads,
        // 24 layers, alternated, ms per token) from a Q8_0 cache (its rows converted first):
        // 6.01 / 6.00 -> 4.75 / 4.76 as 4 + 3 queries.
        if V::W == 16 && (5..=8).contains(&nq) {
            match nq {
                5 => values_rows::<V, 5, F16>(p, nqp, 0, v, vs, dvp, nc, acc),
                6 => values_rows::<V, 6, F16>(p, nqp, 0, v, vs, dvp, nc, acc),
                7 => values_rows::<V, 7, F16>(p, nqp, 0, v, vs, dvp, nc, acc),
                _ => values_rows::<V, 8, F16>(p, nqp, 0, v, vs, dvp, nc, acc),
            }
            return;
        }
        // The queries left after the groups of `QV` go in one group too: NEON's 7 heads per KV
        // head are 4 + 3, one pass fewer over the value rows than 4 + 1 + 1 + 1.
        let mut i = 0;
        while i < nq {
            let q = (nq - i).min(QV);
            match q {
                1 => values_rows::<V, 1, F16>(p, nqp, i, v, vs, dvp, nc, acc),
                2 => values_rows::<V, 2, F16>(p, nqp, i, v, vs, dvp, nc, acc),
                3 => values_rows::<V, 3, F16>(p, nqp, i, v, vs, dvp, nc, acc),
                _ => values_rows::<V, QV, F16>(p, nqp, i, v, vs, dvp, nc, acc),
            }
            i += q;
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;
    use std::arch::asm;

    use super::lanes::{self, Lanes};
    use crate::kernels::exp::neon::exp128;

    #[derive(Clone, Copy)]
    struct V128(float32x4_t);

    impl Lanes for V128 {
        const W: usize = 4;
        #[inline(always)]
        unsafe fn zero() -> Self {
            V128(vdupq_n_f32(0.0))
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            V128(vdupq_n_f32(x))
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            V128(vld1q_f32(p))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            vst1q_f32(p, self.0)
        }
        #[inline(always)]
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
            V128(vfmaq_f32(c.0, a.0, b.0))
        }
        #[inline(always)]
        unsafe fn add(self, o: Self) -> Self {
            V128(vaddq_f32(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn sub(self, o: Self) -> Self {
            V128(vsubq_f32(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn mul(self, o: Self) -> Self {
            V128(vmulq_f32(self.0, o.0))
        }
        /// `f32::max`'s (IEEE maxNum: a NaN loses to a number).
        #[inline(always)]
        unsafe fn max(self, o: Self) -> Self {
            V128(vmaxnmq_f32(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn exp_neg(self) -> Self {
            V128(exp128(self.0))
        }
        /// `fcvtn` / `fcvtl` by `asm!` (their f16 intrinsics are not stable): round to nearest
        /// even, as the scalar code's `half` conversion.
        #[inline(always)]
        unsafe fn round_f16(self) -> Self {
            let r: float32x4_t;
            asm!("fcvtn {0:v}.4h, {1:v}.4s", "fcvtl {0:v}.4s, {0:v}.4h", out(vreg) r, in(vreg) self.0,
                 options(pure, nomem, nostack, preserves_flags));
            V128(r)
        }
    }

    /// Converts the first multiple of 4 of `n` f16 values; returns how many it converted.
    #[target_feature(enable = "neon")]
    pub unsafe fn f16_row(src: *const u8, dst: *mut f32, n: usize) -> usize {
        let n4 = n / 4 * 4;
        for i in (0..n4).step_by(4) {
            vst1q_f32(dst.add(i), crate::kernels::neon::f16x4(src.add(2 * i)));
        }
        n4
    }

    /// Converts `blocks` Q8_0 blocks.
    #[target_feature(enable = "neon")]
    pub unsafe fn q8_0_row(src: *const u8, dst: *mut f32, blocks: usize) {
        for i in 0..blocks {
            let b = src.add(34 * i);
            let d = half::f16::from_bits((b as *const u16).read_unaligned()).to_f32();
            for h in 0..2 {
                let q = vld1q_s8(b.add(2 + 16 * h) as *const i8);
                let (lo, hi) = (vmovl_s8(vget_low_s8(q)), vmovl_s8(vget_high_s8(q)));
                let parts = [
                    vmovl_s16(vget_low_s16(lo)),
                    vmovl_s16(vget_high_s16(lo)),
                    vmovl_s16(vget_low_s16(hi)),
                    vmovl_s16(vget_high_s16(hi)),
                ];
                for (k, p) in parts.into_iter().enumerate() {
                    vst1q_f32(dst.add(32 * i + 16 * h + 4 * k), vmulq_n_f32(vcvtq_f32_s32(p), d));
                }
            }
        }
    }

    // Entry points: 32 registers, as AVX-512 (4 query vectors in scores, 4 queries in values).

    #[target_feature(enable = "neon")]
    pub unsafe fn scores(qt: *const f32, nqp: usize, k: *const f32, dk: usize, nc: usize, s: *mut f32) {
        lanes::scores::<V128, 4>(qt, nqp, k, dk, nc, s)
    }

    #[target_feature(enable = "neon")]
    pub unsafe fn scale(s: *mut f32, n: usize, f: f32) -> usize {
        lanes::scale::<V128>(s, n, f)
    }

    #[target_feature(enable = "neon")]
    pub unsafe fn max(s: *const f32, nqp: usize, nc: usize, m: *mut f32) {
        lanes::maxes::<V128>(s, nqp, nc, m)
    }

    #[target_feature(enable = "neon")]
    pub unsafe fn weights(s: *mut f32, nqp: usize, nc: usize, m: *const f32, l: *mut f32, round_f16: bool) {
        lanes::weights::<V128>(s, nqp, nc, m, l, round_f16)
    }

    #[target_feature(enable = "neon")]
    pub unsafe fn values(
        p: *const f32,
        nqp: usize,
        nq: usize,
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        lanes::values::<V128, 4, false>(p, nqp, nq, v as *const u8, dvp, dvp, nc, acc)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::lanes::{self, Lanes};
    use crate::kernels::exp::x86::{exp256, exp512};

    #[derive(Clone, Copy)]
    struct V512(__m512);

    /// The whole groups of 16 of `$nc` cells: `$two` on the 32 cells from `$c` while there are
    /// 32, then `$one` on 16; evaluates to how many cells that was. (A macro, not a function
    /// taking closures: closures would not get the calling kernel's target features.)
    macro_rules! whole_groups {
        ($nc:expr, $c:ident => $two:expr, $one:expr) => {{
            let mut $c = 0;
            while $c + 32 <= $nc {
                $two;
                $c += 32;
            }
            while $c + 16 <= $nc {
                $one;
                $c += 16;
            }
            $c
        }};
    }

    /// `permutex2var` indices interleaving two rows' first 8 values (then, [`pair_hi`], their
    /// last 8): lane `2i` from the first row, `2i + 1` from the second.
    #[inline(always)]
    unsafe fn pair_lo() -> __m512i {
        _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0)
    }
    #[inline(always)]
    unsafe fn pair_hi() -> __m512i {
        _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8)
    }
    #[derive(Clone, Copy)]
    struct V256(__m256);

    impl Lanes for V512 {
        const W: usize = 16;
        #[inline(always)]
        unsafe fn zero() -> Self {
            V512(_mm512_setzero_ps())
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            V512(_mm512_set1_ps(x))
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            V512(_mm512_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm512_storeu_ps(p, self.0)
        }
        #[inline(always)]
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
            V512(_mm512_fmadd_ps(a.0, b.0, c.0))
        }
        #[inline(always)]
        unsafe fn add(self, o: Self) -> Self {
            V512(_mm512_add_ps(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn sub(self, o: Self) -> Self {
            V512(_mm512_sub_ps(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn mul(self, o: Self) -> Self {
            V512(_mm512_mul_ps(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn max(self, o: Self) -> Self {
            V512(_mm512_max_ps(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn exp_neg(self) -> Self {
            V512(exp512(self.0))
        }
        #[inline(always)]
        unsafe fn load_f16(p: *const u8) -> Self {
            V512(_mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)))
        }
        #[inline(always)]
        unsafe fn round_f16(self) -> Self {
            V512(_mm512_cvtph_ps(_mm512_cvtps_ph::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(self.0)))
        }
        /// One masked load and compare (the scalar tests compile to a compare, a mask move and
        /// a branch per query).
        #[inline(always)]
        unsafe fn live<const Q: usize>(w: *const f32) -> u32 {
            const { assert!(Q <= 16) };
            let x = _mm512_maskz_loadu_ps(((1u32 << Q) - 1) as u16, w);
            u32::from(_mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(x, _mm512_setzero_ps())) & ((1 << Q) - 1)
        }
        /// A masked multiply-add: no branch on data.
        #[inline(always)]
        unsafe fn fmadd_if(on: bool, a: Self, b: Self, c: Self) -> Self {
            V512(_mm512_mask3_fmadd_ps(a.0, b.0, c.0, u16::from(on).wrapping_neg()))
        }
    }

    impl Lanes for V256 {
        const W: usize = 8;
        #[inline(always)]
        unsafe fn zero() -> Self {
            V256(_mm256_setzero_ps())
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            V256(_mm256_set1_ps(x))
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            V256(_mm256_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm256_storeu_ps(p, self.0)
        }
        #[inline(always)]
        unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
            V256(_mm256_fmadd_ps(a.0, b.0, c.0))
        }
        #[inline(always)]
        unsafe fn add(self, o: Self) -> Self {
            V256(_mm256_add_ps(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn sub(self, o: Self) -> Self {
            V256(_mm256_sub_ps(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn mul(self, o: Self) -> Self {
            V256(_mm256_mul_ps(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn max(self, o: Self) -> Self {
            V256(_mm256_max_ps(self.0, o.0))
        }
        #[inline(always)]
        unsafe fn exp_neg(self) -> Self {
            V256(exp256(self.0))
        }
        #[inline(always)]
        unsafe fn round_f16(self) -> Self {
            V256(_mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                self.0,
            )))
        }
    }

    /// Query vectors `j..j + 16 * Q` x values `e0..e0 + E` (by value, see `AccLayout`) over
    /// cells `0..nc`, with the vectors' live masks `live[c * Q + q]`: per cell, `Q` weight
    /// vectors and `E` broadcast values make `Q * E` multiply-adds, masked unless `ALL_LIVE`
    /// (every mask full: the masks' loads into mask registers then stay out of the loop).
    #[inline(always)]
    unsafe fn values_by_value_tile<const Q: usize, const E: usize, const ALL_LIVE: bool>(
        p: *const f32,
        nqp: usize,
        j: usize,
        live: &[u16],
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
        e0: usize,
    ) {
        let mut a = [[_mm512_setzero_ps(); Q]; E];
        for (x, a) in a.iter_mut().enumerate() {
            for (q, a) in a.iter_mut().enumerate() {
                *a = _mm512_loadu_ps(acc.add((e0 + x) * nqp + j + 16 * q));
            }
        }
        for (c, live) in live.chunks_exact(Q).take(nc).enumerate() {
            let mut w = [_mm512_setzero_ps(); Q];
            for (q, w) in w.iter_mut().enumerate() {
                *w = _mm512_loadu_ps(p.add(c * nqp + j + 16 * q));
            }
            for (x, a) in a.iter_mut().enumerate() {
                let vv = _mm512_set1_ps(*v.add(c * dvp + e0 + x));
                for q in 0..Q {
                    a[q] = if ALL_LIVE {
                        _mm512_fmadd_ps(w[q], vv, a[q])
                    } else {
                        _mm512_mask3_fmadd_ps(w[q], vv, a[q], live[q])
                    };
                }
            }
        }
        for (x, a) in a.iter().enumerate() {
            for (q, a) in a.iter().enumerate() {
                _mm512_storeu_ps(acc.add((e0 + x) * nqp + j + 16 * q), *a);
            }
        }
    }

    /// Query vectors `j..j + 16 * Q` over all values, 64 cells at a time: first each cell's
    /// live masks (weights not zero; NaN counts, as in the scalar code), then the values 4 at a
    /// time.
    #[inline(always)]
    unsafe fn values_by_value_rows<const Q: usize>(
        p: *const f32,
        nqp: usize,
        j: usize,
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        const CHUNK: usize = 64;
        let mut live = [0u16; CHUNK * 4];
        for c0 in (0..nc).step_by(CHUNK) {
            let n = (nc - c0).min(CHUNK);
            let (p, v) = (p.add(c0 * nqp), v.add(c0 * dvp));
            let mut all = u16::MAX;
            for c in 0..n {
                for q in 0..Q {
                    let w = _mm512_loadu_ps(p.add(c * nqp + j + 16 * q));
                    live[c * Q + q] = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(w, _mm512_setzero_ps());
                    all &= live[c * Q + q];
                }
            }
            let live = &live[..n * Q];
            for e0 in (0..dvp).step_by(4) {
                if all == u16::MAX {
                    values_by_value_tile::<Q, 4, true>(p, nqp, j, live, v, dvp, n, acc, e0);
                } else {
                    values_by_value_tile::<Q, 4, false>(p, nqp, j, live, v, dvp, n, acc, e0);
                }
            }
        }
    }

    // The tiers' entry points: AVX-512 has 32 registers (4 query vectors in scores, 4 queries in
    // values), AVX2 16 (2 and 2).

    #[target_feature(enable = "avx512f")]
    pub unsafe fn scores_avx512(
        qt: *const f32,
        nqp: usize,
        k: *const f32,
        dk: usize,
        nc: usize,
        s: *mut f32,
    ) {
        lanes::scores::<V512, 4>(qt, nqp, k, dk, nc, s)
    }

    /// Rows `r[0..16]` transposed: `t[e]` is element `e` of every row, row `r` in lane `r`.
    #[inline(always)]
    unsafe fn transpose16(r: &[__m512; 16]) -> [__m512; 16] {
        // Pairs of rows interleaved, then pairs of pairs (each 128-bit lane: one column of four
        // rows), then the four row groups' 128-bit lanes gathered per column.
        let mut a = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let mut b = [_mm512_setzero_ps(); 16];
        for i in 0..4 {
            let pd = |x: __m512| _mm512_castps_pd(x);
            let (a0, a1, a2, a3) = (pd(a[4 * i]), pd(a[4 * i + 1]), pd(a[4 * i + 2]), pd(a[4 * i + 3]));
            b[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
            b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
            b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
            b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
        }
        // b[4i + j], 128-bit lane L: column 4L + j of rows 4i..4i+4.
        let mut t = [_mm512_setzero_ps(); 16];
        for j in 0..4 {
            let c0 = _mm512_shuffle_f32x4::<0x44>(b[j], b[4 + j]);
            let c1 = _mm512_shuffle_f32x4::<0xEE>(b[j], b[4 + j]);
            let c2 = _mm512_shuffle_f32x4::<0x44>(b[8 + j], b[12 + j]);
            let c3 = _mm512_shuffle_f32x4::<0xEE>(b[8 + j], b[12 + j]);
            t[j] = _mm512_shuffle_f32x4::<0x88>(c0, c2);
            t[4 + j] = _mm512_shuffle_f32x4::<0xDD>(c0, c2);
            t[8 + j] = _mm512_shuffle_f32x4::<0x88>(c1, c3);
            t[12 + j] = _mm512_shuffle_f32x4::<0xDD>(c1, c3);
        }
        t
    }

    /// Scores of `G` groups of 16 cells from `c` (cells in lanes) x queries `0..Q`, into `s`
    /// (padding queries 0).
    #[inline(always)]
    unsafe fn scores_cells<const Q: usize, const G: usize>(
        qt: *const f32,
        nqp: usize,
        k: *const f32,
        dk: usize,
        c: usize,
        s: *mut f32,
    ) {
        let mut acc = [[_mm512_setzero_ps(); Q]; G];
        for d0 in (0..dk).step_by(16) {
            for (g, acc) in acc.iter_mut().enumerate() {
                let rows: [__m512; 16] =
                    std::array::from_fn(|r| _mm512_loadu_ps(k.add((c + 16 * g + r) * dk + d0)));
                let t = transpose16(&rows);
                for (e, t) in t.iter().enumerate() {
                    for (i, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_fmadd_ps(*t, _mm512_set1_ps(*qt.add((d0 + e) * nqp + i)), *acc);
                    }
                }
            }
        }
        store_cell_lanes(&acc, nqp, c, s);
    }

    /// Cells `c..c + 16` of f16 key rows (`dk` values each), values `d0..d0 + 16`, as 8 vectors:
    /// vector `j`'s low half holds the 16 cells' value `d0 + j` (f16), its high half value
    /// `d0 + 8 + j`. Asks for the same bytes `ahead` further on (every other step: a cache line
    /// per row), unless `ahead` is 0.
    #[inline(always)]
    unsafe fn f16_columns(k16: *const u8, dk: usize, c: usize, d0: usize, ahead: usize) -> [__m512i; 8] {
        if ahead != 0 && d0.is_multiple_of(32) {
            for r in 0..16 {
                let p = k16.wrapping_add(((c + r) * dk + d0) * 2 + ahead);
                _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
            }
        }
        // Row r in the low 256 bits, row r + 8 in the high: per 128-bit lane, 8 values of one
        // row (row r's values 0-7, 8-15, then row r + 8's).
        let mut x = [_mm512_setzero_si512(); 8];
        for (r, x) in x.iter_mut().enumerate() {
            let lo = _mm256_loadu_si256(k16.add(((c + r) * dk + d0) * 2) as *const __m256i);
            let hi = _mm256_loadu_si256(k16.add(((c + r + 8) * dk + d0) * 2) as *const __m256i);
            *x = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        }
        // 8 x 8 transposes of 16-bit values within each 128-bit lane: rows side by side in
        // pairs, fours, then eights.
        let mut a = [_mm512_setzero_si512(); 8];
        for i in 0..4 {
            a[2 * i] = _mm512_unpacklo_epi16(x[2 * i], x[2 * i + 1]);
            a[2 * i + 1] = _mm512_unpackhi_epi16(x[2 * i], x[2 * i + 1]);
        }
        let mut b = [_mm512_setzero_si512(); 8];
        for i in 0..2 {
            b[4 * i] = _mm512_unpacklo_epi32(a[4 * i], a[4 * i + 2]);
            b[4 * i + 1] = _mm512_unpackhi_epi32(a[4 * i], a[4 * i + 2]);
            b[4 * i + 2] = _mm512_unpacklo_epi32(a[4 * i + 1], a[4 * i + 3]);
            b[4 * i + 3] = _mm512_unpackhi_epi32(a[4 * i + 1], a[4 * i + 3]);
        }
        let mut y = [_mm512_setzero_si512(); 8];
        for i in 0..4 {
            y[2 * i] = _mm512_unpacklo_epi64(b[i], b[4 + i]);
            y[2 * i + 1] = _mm512_unpackhi_epi64(b[i], b[4 + i]);
        }
        // y[j]'s lanes: cells c..c + 8 value j, the same cells value 8 + j, cells c + 8..c + 16
        // value j, value 8 + j; the middle lanes swapped, each half is one value of 16 cells.
        for y in y.iter_mut() {
            *y = _mm512_shuffle_i64x2::<0xD8>(*y, *y);
        }
        y
    }

    /// [`scores_cells`] from f16 key rows, converted 16 cells x 16 values at a time in registers
    /// (a 16-bit transpose, then one conversion per value): no f32 copy of the keys is stored
    /// and loaded again, and the transposes move half as many bytes.
    #[inline(always)]
    unsafe fn scores_cells_f16<const Q: usize, const G: usize>(
        qt: *const f32,
        nqp: usize,
        k16: *const u8,
        dk: usize,
        (c, ahead): (usize, usize),
        s: *mut f32,
    ) {
        let mut acc = [[_mm512_setzero_ps(); Q]; G];
        for d0 in (0..dk).step_by(16) {
            let mut z = [[_mm512_setzero_si512(); 8]; G];
            for (g, z) in z.iter_mut().enumerate() {
                *z = f16_columns(k16, dk, c + 16 * g, d0, ahead);
            }
            for d in 0..16 {
                for (z, acc) in z.iter().zip(acc.iter_mut()) {
                    let half = if d < 8 {
                        _mm512_castsi512_si256(z[d])
                    } else {
                        _mm512_extracti64x4_epi64::<1>(z[d - 8])
                    };
                    let t = _mm512_cvtph_ps(half);
                    for (i, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_fmadd_ps(t, _mm512_set1_ps(*qt.add((d0 + d) * nqp + i)), *acc);
                    }
                }
            }
        }
        store_cell_lanes(&acc, nqp, c, s);
    }

    /// Scores with cells in lanes (`acc[g][i]`: query `i` of cells `c + 16 g..`) to `s`'s rows,
    /// the padding queries zero.
    #[inline(always)]
    unsafe fn store_cell_lanes<const Q: usize, const G: usize>(
        acc: &[[__m512; Q]; G],
        nqp: usize,
        c: usize,
        s: *mut f32,
    ) {
        for (g, acc) in acc.iter().enumerate() {
            let mut by_cell = [[0f32; 16]; Q];
            for (i, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(by_cell[i].as_mut_ptr(), *a);
            }
            for cell in 0..16 {
                let row = s.add((c + 16 * g + cell) * nqp);
                for (i, by_cell) in by_cell.iter().enumerate() {
                    *row.add(i) = by_cell[cell];
                }
                for i in Q..nqp {
                    *row.add(i) = 0.0;
                }
            }
        }
    }

    /// [`scores_cell_lanes`] from f16 key rows (`dk` values each) as they are; asks for the rows
    /// `ahead` bytes further on as it goes (0: not).
    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn scores_cell_lanes_f16(
        qt: *const f32,
        nqp: usize,
        nq: usize,
        k16: *const u8,
        dk: usize,
        nc: usize,
        ahead: usize,
        s: *mut f32,
    ) -> usize {
        macro_rules! go {
            ($q:literal) => {
                whole_groups!(
                    nc,
                    c => scores_cells_f16::<$q, 2>(qt, nqp, k16, dk, (c, ahead), s),
                    scores_cells_f16::<$q, 1>(qt, nqp, k16, dk, (c, ahead), s)
                )
            };
        }
        match nq {
            0 => 0,
            1 => go!(1),
            2 => go!(2),
            3 => go!(3),
            _ => go!(4),
        }
    }

    /// The cells of whole groups of 16 of [`super::scores`] with cells in lanes, for `nq <=
    /// CELL_LANES_MAX_QUERIES` and `dk` a multiple of 16; returns how many cells it did. Per
    /// score the same multiply-adds in the same order as the scalar code.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn scores_cell_lanes(
        qt: *const f32,
        nqp: usize,
        nq: usize,
        k: *const f32,
        dk: usize,
        nc: usize,
        s: *mut f32,
    ) -> usize {
        // Two groups give a query two independent chains.
        macro_rules! go {
            ($q:literal) => {
                whole_groups!(
                    nc,
                    c => scores_cells::<$q, 2>(qt, nqp, k, dk, c, s),
                    scores_cells::<$q, 1>(qt, nqp, k, dk, c, s)
                )
            };
        }
        match nq {
            0 => 0,
            1 => go!(1),
            2 => go!(2),
            3 => go!(3),
            _ => go!(4),
        }
    }

    /// Scores of `2 * P` cells from `c` for 8 query lanes, two cells per vector: lane `2i` is
    /// query `i` with cell `c + 2p`, lane `2i + 1` the same query with cell `c + 2p + 1`. One
    /// 64-bit broadcast gives both cells' values of a dimension against the queries doubled:
    /// from keys already paired (`PAIRED`, [`super::pair_rows`]' layout), or from key rows whose
    /// pairs are interleaved 16 dimensions at a time into `pairs` here.
    #[inline(always)]
    unsafe fn scores_pairs<const P: usize, const PAIRED: bool>(
        qt: *const f32,
        k: *const f32,
        dk: usize,
        c: usize,
        s: *mut f32,
    ) {
        let doubled = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        let mut acc = [_mm512_setzero_ps(); P];
        let mut pairs = [[_mm512_setzero_ps(); 2]; P];
        for d0 in (0..dk).step_by(16) {
            // Dimension d0 + e of pair p: the 64 bits at float `base + p * stride + 2e`.
            let (base, stride) = if PAIRED {
                (k.add(c * dk + 2 * d0), 2 * dk)
            } else {
                for (p, pair) in pairs.iter_mut().enumerate() {
                    let a = _mm512_loadu_ps(k.add((c + 2 * p) * dk + d0));
                    let b = _mm512_loadu_ps(k.add((c + 2 * p + 1) * dk + d0));
                    *pair = [
                        _mm512_permutex2var_ps(a, pair_lo(), b),
                        _mm512_permutex2var_ps(a, pair_hi(), b),
                    ];
                }
                (pairs.as_ptr() as *const f32, 32)
            };
            for e in 0..16 {
                let q = _mm512_castps256_ps512(_mm256_loadu_ps(qt.add((d0 + e) * 8)));
                let q = _mm512_permutexvar_ps(doubled, q);
                for (p, acc) in acc.iter_mut().enumerate() {
                    let both = base.add(p * stride + 2 * e) as *const i64;
                    let kk = _mm512_castsi512_ps(_mm512_set1_epi64(both.read_unaligned()));
                    *acc = _mm512_fmadd_ps(q, kk, *acc);
                }
            }
        }
        // Cell c + 2p's 8 scores, then cell c + 2p + 1's: the two rows of `s`, which follow
        // each other.
        let rows = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
        for (p, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(s.add((c + 2 * p) * 8), _mm512_permutexvar_ps(rows, *acc));
        }
    }

    /// The cells of whole groups of 16 of [`super::scores`] for 8 query lanes (`nqp == 8`)
    /// with two cells per vector, for `dk` a multiple of 16, from keys paired or in rows
    /// (`paired`); returns how many cells it did. Per score the same multiply-adds in the same
    /// order as the scalar code.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn scores_cell_pairs(
        qt: *const f32,
        k: *const f32,
        dk: usize,
        nc: usize,
        paired: bool,
        s: *mut f32,
    ) -> usize {
        macro_rules! go {
            ($paired:literal) => {
                whole_groups!(
                    nc,
                    c => scores_pairs::<16, $paired>(qt, k, dk, c, s),
                    scores_pairs::<8, $paired>(qt, k, dk, c, s)
                )
            };
        }
        if paired {
            go!(true)
        } else {
            go!(false)
        }
    }

    /// [`super::f16_key_pairs`] for `n_pairs` pairs, `dk` a multiple of 16.
    #[target_feature(enable = "avx512f,f16c")]
    pub unsafe fn f16_key_pairs_avx512(src: *const u8, dk: usize, n_pairs: usize, dst: *mut f32) {
        for p in 0..n_pairs {
            let (a, b) = (src.add(4 * p * dk), src.add((4 * p + 2) * dk));
            let out = dst.add(2 * p * dk);
            for d0 in (0..dk).step_by(16) {
                let x = _mm512_cvtph_ps(_mm256_loadu_si256(a.add(2 * d0) as *const __m256i));
                let y = _mm512_cvtph_ps(_mm256_loadu_si256(b.add(2 * d0) as *const __m256i));
                _mm512_storeu_ps(out.add(2 * d0), _mm512_permutex2var_ps(x, pair_lo(), y));
                _mm512_storeu_ps(out.add(2 * d0 + 16), _mm512_permutex2var_ps(x, pair_hi(), y));
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn max_avx512(s: *const f32, nqp: usize, nc: usize, m: *mut f32) {
        lanes::maxes::<V512>(s, nqp, nc, m)
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn weights_avx512(
        s: *mut f32,
        nqp: usize,
        nc: usize,
        m: *const f32,
        l: *mut f32,
        round_f16: bool,
    ) {
        lanes::weights::<V512>(s, nqp, nc, m, l, round_f16)
    }

    /// [`super::weights`] for 8 query lanes (`nqp == 8`) on whole pairs of cells, two cells
    /// per vector (their rows of `s` follow each other); returns how many cells it did. Each
    /// query's sum still adds the cells' weights one at a time, in order.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn weights_cell_pairs(
        s: *mut f32,
        nc: usize,
        m: *const f32,
        l: *mut f32,
        round_f16: bool,
    ) -> usize {
        let m8 = _mm512_castps256_ps512(_mm256_loadu_ps(m));
        let mv = V512(_mm512_shuffle_f32x4::<0x44>(m8, m8));
        let mut lv = _mm256_loadu_ps(l);
        let mut c = 0;
        while c + 2 <= nc {
            let p = s.add(c * 8);
            let mut w = V512::load(p).sub(mv).exp_neg();
            if round_f16 {
                w = w.round_f16();
            }
            w.store(p);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(w.0)));
            lv = _mm256_add_ps(_mm256_add_ps(lv, _mm512_castps512_ps256(w.0)), hi);
            c += 2;
        }
        _mm256_storeu_ps(l, lv);
        c
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn values_avx512(
        p: *const f32,
        nqp: usize,
        nq: usize,
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        lanes::values::<V512, 4, false>(p, nqp, nq, v as *const u8, dvp, dvp, nc, acc)
    }

    /// [`values_avx512`] from f16 value rows.
    #[target_feature(enable = "avx512f,f16c")]
    pub unsafe fn values_f16_avx512(
        p: *const f32,
        nqp: usize,
        nq: usize,
        v: *const u8,
        vs: usize,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        lanes::values::<V512, 4, true>(p, nqp, nq, v, vs, dvp, nc, acc)
    }

    /// The weighted values by value (see `AccLayout`): up to 4 query vectors at a time, which
    /// with 4 values take 16 accumulators.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn values_by_value_avx512(
        p: *const f32,
        nqp: usize,
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        let mut j = 0;
        while j < nqp {
            let q = ((nqp - j) / 16).min(4);
            match q {
                1 => values_by_value_rows::<1>(p, nqp, j, v, dvp, nc, acc),
                2 => values_by_value_rows::<2>(p, nqp, j, v, dvp, nc, acc),
                3 => values_by_value_rows::<3>(p, nqp, j, v, dvp, nc, acc),
                _ => values_by_value_rows::<4>(p, nqp, j, v, dvp, nc, acc),
            }
            j += 16 * q;
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn scores_avx2(qt: *const f32, nqp: usize, k: *const f32, dk: usize, nc: usize, s: *mut f32) {
        lanes::scores::<V256, 2>(qt, nqp, k, dk, nc, s)
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn scale_avx512(s: *mut f32, n: usize, f: f32) -> usize {
        lanes::scale::<V512>(s, n, f)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn scale_avx2(s: *mut f32, n: usize, f: f32) -> usize {
        lanes::scale::<V256>(s, n, f)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn max_avx2(s: *const f32, nqp: usize, nc: usize, m: *mut f32) {
        lanes::maxes::<V256>(s, nqp, nc, m)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn weights_avx2(
        s: *mut f32,
        nqp: usize,
        nc: usize,
        m: *const f32,
        l: *mut f32,
        round_f16: bool,
    ) {
        lanes::weights::<V256>(s, nqp, nc, m, l, round_f16)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn values_avx2(
        p: *const f32,
        nqp: usize,
        nq: usize,
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        lanes::values::<V256, 2, false>(p, nqp, nq, v as *const u8, dvp, dvp, nc, acc)
    }

    /// Transposes the 16 x 16 block of rows `src + r * src_stride` into rows
    /// `dst + c * dst_stride`: pairs of rows interleaved, then 4-value groups, then 128-bit
    /// lanes twice.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn transpose16_avx512(src: *const f32, src_stride: usize, dst: *mut f32, dst_stride: usize) {
        // Plain loops, not `array::from_fn`: a closure's body does not get this function's
        // target features, so one the compiler left out of line would call every intrinsic.
        let mut r = [_mm512_setzero_ps(); 16];
        for (i, r) in r.iter_mut().enumerate() {
            *r = _mm512_loadu_ps(src.add(i * src_stride));
        }
        // t[2p], t[2p + 1]: rows 2p and 2p + 1 interleaved, per 128-bit lane L values 4L, 4L + 1
        // and 4L + 2, 4L + 3.
        let mut t = [_mm512_setzero_ps(); 16];
        for p in 0..8 {
            t[2 * p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
            t[2 * p + 1] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
        }
        // u[4g + k], lane L: value 4L + k of rows 4g..4g + 4.
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            for h in 0..2 {
                let (a, b) = (t[4 * g + h], t[4 * g + h + 2]);
                u[4 * g + 2 * h] = _mm512_shuffle_ps::<0x44>(a, b);
                u[4 * g + 2 * h + 1] = _mm512_shuffle_ps::<0xEE>(a, b);
            }
        }
        for k in 0..4 {
            let (lo, hi) = (
                _mm512_shuffle_f32x4::<0x88>(u[k], u[4 + k]),
                _mm512_shuffle_f32x4::<0x88>(u[8 + k], u[12 + k]),
            );
            let (lo1, hi1) = (
                _mm512_shuffle_f32x4::<0xDD>(u[k], u[4 + k]),
                _mm512_shuffle_f32x4::<0xDD>(u[8 + k], u[12 + k]),
            );
            _mm512_storeu_ps(dst.add(k * dst_stride), _mm512_shuffle_f32x4::<0x88>(lo, hi));
            _mm512_storeu_ps(
                dst.add((8 + k) * dst_stride),
                _mm512_shuffle_f32x4::<0xDD>(lo, hi),
            );
            _mm512_storeu_ps(
                dst.add((4 + k) * dst_stride),
                _mm512_shuffle_f32x4::<0x88>(lo1, hi1),
            );
            _mm512_storeu_ps(
                dst.add((12 + k) * dst_stride),
                _mm512_shuffle_f32x4::<0xDD>(lo1, hi1),
            );
        }
    }

    /// Transposes the 8 x 8 block of rows `src + r * src_stride` into rows
    /// `dst + c * dst_stride`: pairs of rows interleaved, then 4-value groups, then the 128-bit
    /// halves.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn transpose8_avx2(src: *const f32, src_stride: usize, dst: *mut f32, dst_stride: usize) {
        let mut r = [_mm256_setzero_ps(); 8];
        for (i, r) in r.iter_mut().enumerate() {
            *r = _mm256_loadu_ps(src.add(i * src_stride));
        }
        // t[2p], t[2p + 1]: rows 2p and 2p + 1 interleaved, per half H values 4H, 4H + 1 and
        // 4H + 2, 4H + 3.
        let mut t = [_mm256_setzero_ps(); 8];
        for p in 0..4 {
            t[2 * p] = _mm256_unpacklo_ps(r[2 * p], r[2 * p + 1]);
            t[2 * p + 1] = _mm256_unpackhi_ps(r[2 * p], r[2 * p + 1]);
        }
        // u[4g + k], half H: value 4H + k of rows 4g..4g + 4.
        let mut u = [_mm256_setzero_ps(); 8];
        for g in 0..2 {
            for h in 0..2 {
                let (a, b) = (t[4 * g + h], t[4 * g + h + 2]);
                u[4 * g + 2 * h] = _mm256_shuffle_ps::<0x44>(a, b);
                u[4 * g + 2 * h + 1] = _mm256_shuffle_ps::<0xEE>(a, b);
            }
        }
        for k in 0..4 {
            _mm256_storeu_ps(
                dst.add(k * dst_stride),
                _mm256_permute2f128_ps::<0x20>(u[k], u[4 + k]),
            );
            _mm256_storeu_ps(
                dst.add((4 + k) * dst_stride),
                _mm256_permute2f128_ps::<0x31>(u[k], u[4 + k]),
            );
        }
    }

    /// Converts the first multiple of 16 of `n` f16 values; returns how many it converted.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn f16_row_avx512(src: *const u8, dst: *mut f32, n: usize) -> usize {
        let n16 = n / 16 * 16;
        for i in (0..n16).step_by(16) {
            let h = _mm256_loadu_si256(src.add(2 * i) as *const __m256i);
            _mm512_storeu_ps(dst.add(i), _mm512_cvtph_ps(h));
        }
        n16 + f16_row(src.add(2 * n16), dst.add(n16), n - n16)
    }

    /// Converts the first multiple of 8 of `n` f16 values; returns how many it converted.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn f16_row(src: *const u8, dst: *mut f32, n: usize) -> usize {
        let n8 = n / 8 * 8;
        for i in (0..n8).step_by(8) {
            let h = _mm_loadu_si128(src.add(2 * i) as *const __m128i);
            _mm256_storeu_ps(dst.add(i), _mm256_cvtph_ps(h));
        }
        n8
    }

    /// The f32 of a Q8_0 block's scale.
    #[inline(always)]
    unsafe fn q8_0_scale(b: *const u8) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
            (b as *const u16).read_unaligned(),
        ))))
    }

    /// Converts `blocks` Q8_0 blocks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    pub unsafe fn q8_0_row_avx512(src: *const u8, dst: *mut f32, blocks: usize) {
        for i in 0..blocks {
            let b = src.add(34 * i);
            let d = _mm512_set1_ps(q8_0_scale(b));
            for h in 0..2 {
                let q = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.add(2 + 16 * h) as *const __m128i));
                _mm512_storeu_ps(dst.add(32 * i + 16 * h), _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
            }
        }
    }

    /// Converts `blocks` Q8_0 blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q8_0_row(src: *const u8, dst: *mut f32, blocks: usize) {
        for i in 0..blocks {
            let b = src.add(34 * i);
            let d = _mm256_set1_ps(q8_0_scale(b));
            for h in 0..4 {
                let q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(2 + 8 * h) as *const __m128i));
                _mm256_storeu_ps(dst.add(32 * i + 8 * h), _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
    }
}
