//! Matrix multiplication of a weight matrix in its file format with a batch of quantized
//! activation rows, spread over a [`ThreadPool`].
//!
//! One token (decode) is a matrix-vector product bound by memory bandwidth: each thread streams a
//! contiguous share of the rows once, 16 or 32 at a time, taking chunks of other threads' shares
//! when done with its own ([`ThreadPool::for_each_chunk_in_shares`]). Batches
//! go through the panel GEMM of [`super::gemm`] when the weight type has one and the batch is big
//! enough to pay for expanding the panels; otherwise each chunk of rows is dotted with every token
//! while it is in cache.

use std::cell::RefCell;
use std::ops::Range;

use super::gemm::{self, ActSide, Panel, Tile, PANEL_ROWS};
use super::{dot_rows, row_bytes, vec_dot_type, Isa};
use crate::quant::GgmlType;
use crate::threads::ThreadPool;

/// A weight matrix: `n_out` rows of `n` values of type `ty`, row `r` at `data[r * row_bytes..]`;
/// the first `packed_rows` rows (a multiple of 16) are in the packed layout of [`super::packed`].
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub ty: GgmlType,
    pub n: usize,
    pub n_out: usize,
    pub row_bytes: usize,
    pub data: &'a [u8],
    pub packed_rows: usize,
}

/// Whether `isa` has kernels for packed matrices of type `ty` (packing is only worth doing then):
/// the x86 tiers have them for every packed layout.
pub fn can_use_packed(isa: Isa, ty: GgmlType) -> bool {
    super::packed::has_layout(ty) && matches!(isa, Isa::Amx | Isa::Avx512 | Isa::AvxVnni | Isa::Avx2)
}

/// Smallest batch that goes through the panel GEMM.
pub const GEMM_MIN_TOKENS: usize = 8;

/// Output pointer shared by the threads of a step; each writes its own rows.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: threads write disjoint elements (their own rows of every token), and the step ends
// before the borrow of the output slice does.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// (A method, so that closures capture the whole `Out`, which is `Sync`, not its pointer.)
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

thread_local! {
    static PANEL: RefCell<Panel> = RefCell::new(Panel::new());
}

/// `out[t * w.n_out + r] = w_r · x_t` for the `n_tokens` activation rows in `xq` (each in
/// `vec_dot_type(w.ty)`, rows back to back).
pub fn matmul(pool: &ThreadPool, isa: Isa, w: &Matrix, xq: &[u8], n_tokens: usize, out: &mut [f32]) {
    matmul_many(pool, isa, n_tokens, &mut [Product { w: *w, xq, out }]);
}

/// One product of [`matmul_many`]: `out = w · x` for activation rows `xq` (in
/// `vec_dot_type(w.ty)`, rows back to back), `out` laid out as [`matmul`]'s.
pub struct Product<'a> {
    pub w: Matrix<'a>,
    pub xq: &'a [u8],
    pub out: &'a mut [f32],
}

/// Most products one [`matmul_many`] call fuses into one step.
pub const MAX_FUSED: usize = 4;

/// Several products of the same `n_tokens` tokens (Q, K and V of a layer; gate and up). Batches
/// below [`GEMM_MIN_TOKENS`] (decode) run as one parallel step whose chunks are 16-row slices of
/// all the matrices (packed groups through the packed kernels, the rest through the row
/// kernels): a decode step of a small model is short enough that each start and join of the
/// pool counts. Bigger batches (compute-bound) go one matrix at a time.
pub fn matmul_many(pool: &ThreadPool, isa: Isa, n_tokens: usize, products: &mut [Product]) {
    assert!(
        products.len() <= MAX_FUSED,
        "matmul_many: more than {MAX_FUSED} products"
    );
    for p in products.iter() {
        check_product(&p.w, p.xq, n_tokens, p.out);
        assert!(
            p.w.packed_rows == 0 || can_use_packed(isa, p.w.ty),
            "packed {} matrix on {isa}",
            p.w.ty
        );
    }
    if n_tokens == 0 {
        return;
    }
    let sides = Sides::new(pool, products, n_tokens);
    if n_tokens >= GEMM_MIN_TOKENS {
        for (i, p) in products.iter_mut().enumerate() {
            batch(pool, isa, &p.w, p.xq, sides.get(i), n_tokens, p.out);
        }
        return;
    }
    // The chunks of product i are numbered first[i]..first[i + 1].
    let total: usize = products.iter().map(|p| p.w.n_out).sum();
    let chunk = decode_rows_per_chunk(total, pool.n_threads());
    let mut first = [0usize; MAX_FUSED + 1];
    let mut dst = [Out(std::ptr::null_mut()); MAX_FUSED];
    for (i, p) in products.iter_mut().enumerate() {
        first[i + 1] = first[i] + p.w.n_out.div_ceil(chunk);
        dst[i] = Out(p.out.as_mut_ptr());
    }
    let n = products.len();
    let products = &*products;
    pool.for_each_chunk_in_shares(first[n], 1, |chunks| {
        for c in chunks {
            let i = (0..n).rfind(|&i| first[i] <= c).expect("first[0] is 0");
            let w = &products[i].w;
            let r0 = (c - first[i]) * chunk;
            let r1 = (r0 + chunk).min(w.n_out);
            let split = w.packed_rows.clamp(r0, r1);
            // SAFETY: chunk c alone writes rows r0..r1 of product i's output, which the caller
            // holds mutably until the step ends; the product passed `check_product`.
            unsafe {
                if r0 < split {
                    let side = sides.get(i).expect("made for packed matrices");
                    packed_groups(
                        isa,
                        w,
                        r0 / PANEL_ROWS..split / PANEL_ROWS,
                        products[i].xq,
                        side,
                        n_tokens,
                        dst[i].ptr(),
                    );
                }
                if split < r1 {
                    gemv_rows(isa, w, split..r1, products[i].xq, n_tokens, dst[i].ptr());
                }
            }
        }
    });
}

/// The activations' side data of each product with packed rows ([`gemm::act_side`]), made once
/// for all the products of one weight type: Q and K (and often V) of a layer share theirs, as
/// do gate and up.
struct Sides {
    made: Vec<ActSide>,
    /// Product `i`'s side data is `made[of[i]]`, if it has packed rows.
    of: [Option<usize>; MAX_FUSED],
}

impl Sides {
    fn new(pool: &ThreadPool, products: &[Product], n_tokens: usize) -> Sides {
        let mut sides = Sides {
            made: Vec::new(),
            of: [None; MAX_FUSED],
        };
        for (i, p) in products.iter().enumerate() {
            if p.w.packed_rows == 0 {
                continue;
            }
            // Side data depends on the weight type, the row length and the activations (all
            // products of one call have the same `n_tokens`): equal ones share.
            let same = (0..i).find(|&j| {
                let q = &products[j];
                sides.of[j].is_some() && q.w.ty == p.w.ty && q.w.n == p.w.n && std::ptr::eq(q.xq, p.xq)
            });
            sides.of[i] = match same {
                Some(j) => sides.of[j],
                None => {
                    let act_ty = vec_dot_type(p.w.ty);
                    let arb = row_bytes(act_ty, p.w.n);
                    let off = super::packed::value_offset(p.w.ty);
                    sides.made.push(gemm::act_side(
                        pool, p.w.ty, act_ty, p.w.n, p.xq, arb, n_tokens, off,
                    ));
                    Some(sides.made.len() - 1)
                }
            };
        }
        sides
    }

    fn get(&self, i: usize) -> Option<&ActSide> {
        self.of[i].map(|k| &self.made[k])
    }
}

/// One product of a batch of [`GEMM_MIN_TOKENS`] or more tokens: packed groups (with their side
/// data `side`), then the other rows through the panel GEMM where [`takes_panels`], else the row
/// kernels.
fn batch(
    pool: &ThreadPool,
    isa: Isa,
    w: &Matrix,
    xq: &[u8],
    side: Option<&ActSide>,
    n_tokens: usize,
    out: &mut [f32],
) {
    let arb = row_bytes(vec_dot_type(w.ty), w.n);
    if w.packed_rows > 0 {
        packed(
            pool,
            isa,
            w,
            xq,
            side.expect("made for packed matrices"),
            n_tokens,
            out,
        );
    }
    let rows = w.packed_rows..w.n_out;
    if rows.is_empty() {
        return;
    }
    if takes_panels(isa, w) {
        gemm(pool, isa, w, rows, xq, arb, n_tokens, out);
    } else {
        gemv(pool, isa, w, rows, xq, n_tokens, out);
    }
}

/// Whether a batch multiplies `w`'s row-major rows through the panel GEMM. Not for types without
/// an expansion, nor for the at most 15 rows past a packed matrix's last group (the x86 tiers'
/// panel GEMM sums in another order than their row kernels, and those rows would cost a whole
/// panel), nor on the scalar tier (its row kernels are the reference's formulas, one per type,
/// which one panel micro-kernel cannot follow). So a token gets the same bits in a batch as
/// alone, except with `OLLAMARS_PACK=0` on x86.
fn takes_panels(isa: Isa, w: &Matrix) -> bool {
    gemm::expansion(w.ty).is_some() && w.packed_rows == 0 && isa != Isa::Scalar
}

/// The checks shared by [`matmul`] and [`matmul_many`].
fn check_product(w: &Matrix, xq: &[u8], n_tokens: usize, out: &[f32]) {
    let wrb = row_bytes(w.ty, w.n);
    assert!(w.row_bytes >= wrb && (w.n_out == 0 || w.data.len() >= (w.n_out - 1) * w.row_bytes + wrb));
    let arb = row_bytes(vec_dot_type(w.ty), w.n);
    assert_eq!(xq.len(), arb * n_tokens, "matmul: activation rows");
    assert_eq!(out.len(), w.n_out * n_tokens, "matmul: output size");
    assert!(w.packed_rows.is_multiple_of(PANEL_ROWS) && w.packed_rows <= w.n_out);
}

/// Rows per work chunk: enough chunks for work stealing to even out the threads, each a whole
/// number of 16-row groups.
fn rows_per_chunk(n_out: usize, threads: usize) -> usize {
    let target = n_out.div_ceil(threads * 8);
    target.div_ceil(16).max(1) * 16
}

/// Whether a one-token step reads its packed groups one at a time rather than in pairs: on AMD
/// Zen 5 and later, where one stream per thread outran two interleaved ones (2026-12-06, 2-vCPU
/// EPYC family 1Ah model 2). Decode's matrices out of cache (`BEST=1 PACKED=1 HUGE=1
/// kernel_bench 2 stream`, 2 alternated rounds, GB/s), pairs -> one group: one thread Q4_0
/// 29-33 -> 37-39, Q4_K 32-34 -> 35-37, Q6_K 33 -> 36-37, Q8_0 34-36 -> 37-39 (probe 38-44); the
/// AVX2 tier on two threads Q4_0 37-41 -> 46-47, Q4_K 40-44 -> 45-46, Q6_K 41 -> 46-51. The whole
/// 1.1B models, tg64, 3 alternated pairs: Q4_0 61.6/63.6/65.6 -> 71.1/74.8/77.7 t/s, Q4_K_M
/// 57.3/61.4/61.4 -> 68.8/71.8/72.6, Q6_K 43.9/45.0/46.4 -> 52.6/52.2/55.2. At three tokens a
/// step pairs were as fast or faster (Q4_K one thread 34-36 against 30-32), so they keep them.
/// Each group's sums are the same either way: no bits change.
#[cfg(target_arch = "x86_64")]
fn one_group_decode() -> bool {
    super::x86::is_zen5_or_later()
}

/// 16-row groups per work chunk of a batch: [`rows_per_chunk`]'s, rounded up to whole pairs, so
/// that the x86 kernels that take two groups at a time (`packed_pair_avx512`) take every group
/// in a pair. A 256-row K or V projection of a 1.1B model on two threads had one-group chunks,
/// run singly: 2.7% of its Q6_K pp512 time (`perf`).
fn packed_groups_per_chunk(packed_rows: usize, threads: usize) -> usize {
    (rows_per_chunk(packed_rows, threads) / PANEL_ROWS).next_multiple_of(2)
}

/// Rows per work chunk of a decode step: chunks only cost an atomic increment and a kernel call
/// each (a thread's chunks are contiguous, see [`ThreadPool::for_each_chunk_in_shares`]), and the
/// smaller they are, the less one thread waits for the other's last chunk at the step's end; whole
/// pairs of 16-row groups, so the packed kernels share each activation load between two groups.
/// With contiguous shares, against 16 chunks per step dealt out in turn (`BEST=1 PACKED=1
/// kernel_bench 2 stream`, 5 alternated runs), median time ratio Q4_K 0.85, Q6_K 0.89, Q4_0
/// 0.95, Q8_0 0.97.
fn decode_rows_per_chunk(n_out: usize, threads: usize) -> usize {
    n_out.div_ceil(threads * 32).div_ceil(32).max(1) * 32
}

/// Rows `rows` (row-major) of every token through the row kernels, into `out` (`n_tokens` rows
/// of `w.n_out`).
///
/// # Safety
/// `w`, `xq` and `n_tokens` passed [`check_product`], `rows` is within `0..w.n_out`, and `out`
/// points to that output with no other thread writing these rows.
unsafe fn gemv_rows(isa: Isa, w: &Matrix, rows: Range<usize>, xq: &[u8], n_tokens: usize, out: *mut f32) {
    let arb = row_bytes(vec_dot_type(w.ty), w.n);
    // Float weights: tiles of rows x tokens, each with the row kernel's steps. The tiers and the
    // BF16 choice follow `dot_rows`'s, whose bits they must give (float_batches_match_decode_bitwise).
    #[cfg(target_arch = "x86_64")]
    if n_tokens > 1
        && matches!(w.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        && matches!(isa, Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 | Isa::Amx)
    {
        let run = match isa {
            Isa::Avx512 | Isa::Amx if super::has_avx512bf16() => super::x86::float_batch_avx512bf16,
            Isa::Avx512 | Isa::Amx => super::x86::float_batch_avx512,
            _ => super::x86::float_batch_avx2,
        };
        run(
            w.ty,
            w.n,
            w.data[rows.start * w.row_bytes..].as_ptr(),
            w.row_bytes,
            rows.len(),
            xq.as_ptr(),
            arb,
            n_tokens,
            out.add(rows.start),
            w.n_out,
        );
        return;
    }
    for t in 0..n_tokens {
        let o = std::slice::from_raw_parts_mut(out.add(t * w.n_out + rows.start), rows.len());
        dot_rows(
            isa,
            w.ty,
            w.n,
            &w.data[rows.start * w.row_bytes..],
            w.row_bytes,
            &xq[t * arb..(t + 1) * arb],
            o,
        );
    }
}

/// Rows `range` (row-major) through the row kernels.
fn gemv(
    pool: &ThreadPool,
    isa: Isa,
    w: &Matrix,
    range: Range<usize>,
    xq: &[u8],
    n_tokens: usize,
    out: &mut [f32],
) {
    let chunk = rows_per_chunk(range.len(), pool.n_threads());
    let dst = Out(out.as_mut_ptr());
    pool.for_each_chunk(range.len(), chunk, |rows| {
        let rows = range.start + rows.start..range.start + rows.end;
        // SAFETY: `matmul` checked the product; this chunk's rows are written by this thread only.
        unsafe { gemv_rows(isa, w, rows, xq, n_tokens, dst.ptr()) };
    });
}

/// Rows `range` (row-major) through the panel GEMM.
#[allow(clippy::too_many_arguments)]
fn gemm(
    pool: &ThreadPool,
    isa: Isa,
    w: &Matrix,
    range: Range<usize>,
    xq: &[u8],
    arb: usize,
    n_tokens: usize,
    out: &mut [f32],
) {
    let e = gemm::expansion(w.ty).expect("checked by the caller");
    // What the panels add to every value: AVX-512's hold values plus 128 (unsigned for
    // `vpdpbusd`), AVX2's small unsigned values where the type allows; the integer sums start
    // at `-off · Σa` (the offset sums, which NEON's signed panels do not read).
    let off: i32 = match isa {
        Isa::Avx512 | Isa::Amx => 128,
        Isa::Avx2 | Isa::AvxVnni => e.unsigned.map_or(0, |(off, _)| off.into()),
        _ => 0,
    };
    let side = gemm::act_side(pool, w.ty, vec_dot_type(w.ty), w.n, xq, arb, n_tokens, off);
    let n_panels = range.len().div_ceil(PANEL_ROWS);
    let dst = Out(out.as_mut_ptr());
    pool.for_each_chunk(n_panels, 1, |panels| {
        PANEL.with(|cell| {
            let mut panel = cell.borrow_mut();
            for pi in panels {
                let r0 = range.start + pi * PANEL_ROWS;
                let rows = (range.end - r0).min(PANEL_ROWS);
                gemm::expand(
                    w.ty,
                    w.n,
                    &w.data[r0 * w.row_bytes..],
                    w.row_bytes,
                    rows,
                    off as u8 as i8,
                    &mut panel,
                );
                let tile = Tile {
                    panel: &panel,
                    e,
                    side: &side,
                    xq,
                    row_bytes: arb,
                };
                // SAFETY: rows r0..r0+rows of every token are this thread's; the tile's pointers
                // stay within the panel, the side data and the activation rows.
                unsafe { run_tile(isa, &tile, 0..n_tokens, dst.ptr().add(r0), w.n_out, rows) };
            }
        });
    });
}

/// The packed groups: 16 rows at a time against all tokens.
fn packed(
    pool: &ThreadPool,
    isa: Isa,
    w: &Matrix,
    xq: &[u8],
    side: &ActSide,
    n_tokens: usize,
    out: &mut [f32],
) {
    let n_groups = w.packed_rows / PANEL_ROWS;
    let dst = Out(out.as_mut_ptr());
    let chunk = packed_groups_per_chunk(w.packed_rows, pool.n_threads());
    pool.for_each_chunk(n_groups, chunk, |groups| {
        // SAFETY: `matmul_many` checked the product; rows of these groups are this thread's.
        unsafe { packed_groups(isa, w, groups, xq, side, n_tokens, dst.ptr()) };
    });
}

/// Tokens a thread runs through its packed groups at a time: their activations (at most ~0.8
/// MiB for the 5632-wide FFN down projection of a 1.1B model) stay in L2 while every group of
/// the thread reads them, instead of all the batch's activations being streamed again per group.
#[cfg(target_arch = "x86_64")]
const PACKED_TOKEN_BLOCK: usize = 128;
#[cfg(target_arch = "x86_64")]
const _: () = assert!(PACKED_TOKEN_BLOCK <= super::x86::amx::MAX_TOKENS);

/// Packed groups `groups` of `w` against every token, into `out` (`n_tokens` rows of `w.n_out`).
///
/// # Safety
/// The product passed [`check_product`], the groups lie within `w.packed_rows`, `side` was made
/// from `xq`, and no other thread writes these rows of `out`.
unsafe fn packed_groups(
    isa: Isa,
    w: &Matrix,
    groups: Range<usize>,
    xq: &[u8],
    side: &ActSide,
    n_tokens: usize,
    out: *mut f32,
) {
    // Only the x86 tiers have packed kernels ([`can_use_packed`]): no other tier packs a matrix.
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Amx | Isa::Avx512 | Isa::AvxVnni | Isa::Avx2) {
        let args = super::x86::PkArgs {
            n_tiles: w.n / w.ty.block_size() as usize,
            side,
            xq,
            row_bytes: row_bytes(vec_dot_type(w.ty), w.n),
        };
        let group_bytes = PANEL_ROWS * w.row_bytes;
        // The AMX tier's Q6_K kernel reads each block's activations from its own copy.
        let amx = isa == Isa::Amx && w.ty == crate::quant::GgmlType::Q6_K;
        // Two groups at a time where the kernel shares activation loads between them (except
        // one token on Zen 5: [`one_group_decode`]); decided once per call, not per group.
        let pairs = !(n_tokens == 1 && one_group_decode());
        for t0 in (0..n_tokens).step_by(PACKED_TOKEN_BLOCK) {
            let tokens = t0..n_tokens.min(t0 + PACKED_TOKEN_BLOCK);
            let act = amx.then(|| super::x86::amx::pack_act(&args, tokens.clone()));
            let mut g = groups.start;
            while g < groups.end {
                let pair = pairs && g + 2 <= groups.end;
                let group = w.data[g * group_bytes..(g + 1) * group_bytes].as_ptr();
                let o = out.add(g * PANEL_ROWS);
                if let Some(act) = act {
                    let n_groups = 1 + pair as usize;
                    super::x86::amx::packed_q6k(
                        &args,
                        group,
                        group_bytes,
                        n_groups,
                        tokens.clone(),
                        act,
                        o,
                        w.n_out,
                    );
                } else if matches!(isa, Isa::Avx2 | Isa::AvxVnni) {
                    let n_groups = 1 + pair as usize;
                    let run = if isa == Isa::AvxVnni {
                        super::x86::avx2_packed::packed_avxvnni
                    } else {
                        super::x86::avx2_packed::packed_avx2
                    };
                    run(
                        w.ty,
                        &args,
                        group,
                        group_bytes,
                        n_groups,
                        tokens.clone(),
                        o,
                        w.n_out,
                    );
                } else {
                    let run = if pair {
                        super::x86::packed_pair_avx512
                    } else {
                        super::x86::packed_avx512
                    };
                    run(w.ty, &args, group, group_bytes, tokens.clone(), o, w.n_out);
                }
                g += 1 + pair as usize;
            }
        }
        return;
    }
    let _ = (isa, w, groups, xq, side, n_tokens, out);
    unreachable!("packed matrices only on tiers with packed kernels");
}

/// Runs the micro-kernel of `isa`.
unsafe fn run_tile(
    isa: Isa,
    tile: &Tile,
    tokens: std::ops::Range<usize>,
    out: *mut f32,
    os: usize,
    rows: usize,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Amx => super::x86::gemm_avx512(tile, tokens, out, os, rows),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => super::x86::gemm_avx2(tile, tokens, out, os, rows),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => super::neon::gemm(tile, tokens, out, os, rows),
        _ => unreachable!("no panel GEMM on {isa}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::tests::{random_act, random_rows, Rng, WEIGHT_TYPES};
    use crate::quant;

    /// `got` (`n_tokens` rows of `n_out`) against the reference dot product of each row of the
    /// row-major `data` with each token, within float rounding of the row's magnitude.
    fn assert_matches_reference(ty: GgmlType, n: usize, data: &[u8], xq: &[u8], got: &[f32], what: &str) {
        let (rb, arb) = (row_bytes(ty, n), row_bytes(vec_dot_type(ty), n));
        let n_out = data.len() / rb;
        let mut mag = vec![0f32; n];
        for r in 0..n_out {
            let row = &data[r * rb..(r + 1) * rb];
            quant::dequantize_row(ty, row, &mut mag).unwrap();
            let scale: f32 = mag.iter().map(|v| v.abs()).sum::<f32>() * 4.0;
            for t in 0..got.len() / n_out {
                let want = quant::vec_dot(ty, n, row, &xq[t * arb..(t + 1) * arb]);
                let g = got[t * n_out + r];
                assert!(
                    (g - want).abs() <= 1e-5 * scale.max(1e-3),
                    "{what}: row {r} token {t}: {g} vs {want}"
                );
            }
        }
    }

    #[test]
    fn batch_chunks_are_whole_pairs_of_groups() {
        // K/V of a 1.1B model, its Q/O, FFN and output rows, on 1..4 threads.
        for rows in [256, 2048, 5632, 32000, 16, 48] {
            for threads in 1..=4 {
                let chunk = packed_groups_per_chunk(rows, threads);
                assert!(
                    chunk >= 2 && chunk.is_multiple_of(2),
                    "{rows} rows, {threads} threads: {chunk}"
                );
            }
        }
        assert_eq!(packed_groups_per_chunk(256, 2), 2);
    }

    /// Packed matrices (16-row groups plus a row-major tail) against the reference dots, with
    /// token counts that use every column tile (8, 4, 1) and super-block counts that are odd.
    #[test]
    fn packed_matmul_matches_reference() {
        use crate::kernels::packed;
        let pool = ThreadPool::new(2).unwrap();
        let mut rng = Rng::new(9);
        for isa in Isa::supported() {
            for ty in packed::TYPES {
                if !can_use_packed(isa, ty) {
                    continue;
                }
                let bs = ty.block_size() as usize;
                // 760 rows: decode chunks of 2 groups on 2 threads and a last chunk of one group
                // and an 8-row row-major tail.
                for (n, n_out) in [(2 * bs, 16), (3 * bs, 37), (5 * bs, 64), (3 * bs, 760)] {
                    let data = random_rows(&mut rng, ty, n, n_out);
                    let (pk, packed_rows) = packed_copy(ty, n, &data);
                    let pm = matrix(ty, n, &pk, packed_rows);
                    // 140 tokens: more than one block of PACKED_TOKEN_BLOCK.
                    let big: &[usize] = if n_out == 64 { &[140, 300] } else { &[] };
                    let counts: &[usize] = if n_out == 760 {
                        &[1, 2, 5]
                    } else {
                        &[1, 2, 5, 13, 23]
                    };
                    for &n_tokens in counts.iter().chain(big) {
                        let mut xq = Vec::new();
                        for _ in 0..n_tokens {
                            xq.extend(random_act(&mut rng, ty, n).1);
                        }
                        let mut got = vec![f32::NAN; n_out * n_tokens];
                        matmul(&pool, isa, &pm, &xq, n_tokens, &mut got);
                        let what = format!("{isa} {ty} n={n} n_out={n_out} tokens={n_tokens}");
                        assert_matches_reference(ty, n, &data, &xq, &got, &what);
                    }
                }
            }
        }
    }

    /// A token's product is the same, bit for bit, alone (decode's one-column kernels) and
    /// inside a batch (the multi-column tiles, or a few tokens decoded together): decode and
    /// prefill never disagree, nor does a slot decoding beside others. On the x86 tiers the
    /// matrices are packed, with a row-major tail; NEON has no packed kernels and takes the row
    /// kernels and the panel GEMM; the scalar tier takes its row kernels in both.
    #[test]
    fn decode_matches_batch_bitwise() {
        use crate::kernels::packed;
        let pool = ThreadPool::new(2).unwrap();
        let mut rng = Rng::new(21);
        for isa in Isa::supported() {
            for ty in packed::TYPES {
                // 5 super-blocks: K-quant batches unpack them in more than one chunk; 13 and 21
                // tokens use the 8-, 4- and 1-token tiles (13: those types that unpack from
                // fewer than 13 tokens, the others pass over the packed tiles a few tokens at a
                // time; 21: every type's tiles); 48 rows: pairs of groups and single ones in
                // batches, single groups in decode; 760 rows: decode chunks of 2 groups on 2
                // threads and a last chunk of one group and an 8-row row-major tail.
                // 2 and 3 tokens: a few slots decoding together, two tokens per pass over a
                // group. The AMX tier's Q6_K: 13 and 21 tokens stay off the tiles; 125 go on
                // them (3 pairs of 16-token tiles, one tile and 13 tokens past them).
                #[cfg(target_arch = "x86_64")]
                const _: () = assert!(crate::kernels::x86::amx::MIN_TOKENS <= 112);
                #[cfg(target_arch = "x86_64")]
                const _: () = assert!(crate::kernels::x86::amx::MIN_TOKENS > 21);
                let counts: &[usize] = if isa == Isa::Amx {
                    &[2, 3, 13, 21, 125]
                } else {
                    &[2, 3, 13, 21]
                };
                for (n_out, &n_tokens) in [48, 760]
                    .into_iter()
                    .flat_map(|n| counts.iter().map(move |c| (n, c)))
                {
                    let n = 5 * ty.block_size() as usize;
                    let data = random_rows(&mut rng, ty, n, n_out);
                    let (data, packed_rows) = if can_use_packed(isa, ty) {
                        packed_copy(ty, n, &data)
                    } else {
                        (data, 0)
                    };
                    let w = matrix(ty, n, &data, packed_rows);
                    let xq: Vec<Vec<u8>> = (0..n_tokens).map(|_| random_act(&mut rng, ty, n).1).collect();
                    assert_batch_gives_decode_bits(&pool, isa, &w, &xq, &format!("n_out {n_out}"));
                }
            }
        }
    }

    /// `w` times the activation rows `xq` in one batch gives each token the bits of its own
    /// product (`what` names the case in the failure).
    fn assert_batch_gives_decode_bits(pool: &ThreadPool, isa: Isa, w: &Matrix, xq: &[Vec<u8>], what: &str) {
        let (n_out, n_tokens) = (w.n_out, xq.len());
        let mut batch = vec![0f32; n_out * n_tokens];
        matmul(pool, isa, w, &xq.concat(), n_tokens, &mut batch);
        for (t, x) in xq.iter().enumerate() {
            let mut one = vec![f32::NAN; n_out];
            matmul(pool, isa, w, x, 1, &mut one);
            let want = &batch[t * n_out..(t + 1) * n_out];
            let bad: Vec<usize> = (0..n_out)
                .filter(|&r| one[r].to_bits() != want[r].to_bits())
                .collect();
            assert!(
                bad.is_empty(),
                "{isa} {} {what} token {t} of {n_tokens}: rows {bad:?}",
                w.ty
            );
        }
    }

    /// Float weights (F32, F16, BF16) give a token the same bits in a batch as alone: the x86
    /// tiles of rows x tokens take each row and token through the row kernel's steps.
    /// Lengths with and without a tail past the last whole step (16 elements, 32 for
    /// `vdpbf16ps`, 8 on AVX2); rows in whole tiles of four and past them; rows of 8 KiB (F32)
    /// take the batch in several blocks of rows; 2 tokens (a few slots), 7 and 13 (tiles of six
    /// or two tokens and single tokens past them).
    #[test]
    fn float_batches_match_decode_bitwise() {
        let pool = ThreadPool::new(2).unwrap();
        let mut rng = Rng::new(23);
        for isa in Isa::supported() {
            for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
                for (n, n_out) in [(71, 11), (96, 70), (2053, 70)] {
                    for n_tokens in [2, 7, 13] {
                        let data = random_rows(&mut rng, ty, n, n_out);
                        let w = matrix(ty, n, &data, 0);
                        let xq: Vec<Vec<u8>> = (0..n_tokens).map(|_| random_act(&mut rng, ty, n).1).collect();
                        assert_batch_gives_decode_bits(&pool, isa, &w, &xq, &format!("n {n}"));
                    }
                }
            }
        }
    }

    /// AVX-VNNI's packed kernels give AVX2's bits: the same integer sums, one `vpdpbusd` per
    /// step instead of `maddubs` pair sums, and the same float steps.
    #[test]
    fn avxvnni_matches_avx2_bitwise() {
        use crate::kernels::packed;
        if !Isa::AvxVnni.is_supported() {
            return;
        }
        let pool = ThreadPool::new(2).unwrap();
        let mut rng = Rng::new(33);
        for ty in packed::TYPES {
            let (n, n_out) = (3 * ty.block_size() as usize, 80);
            let (data, packed_rows) = packed_copy(ty, n, &random_rows(&mut rng, ty, n, n_out));
            let w = matrix(ty, n, &data, packed_rows);
            for n_tokens in [1, 13] {
                let xq: Vec<u8> = (0..n_tokens)
                    .flat_map(|_| random_act(&mut rng, ty, n).1)
                    .collect();
                let [mut a, mut b] = [0, 1].map(|_| vec![f32::NAN; n_out * n_tokens]);
                matmul(&pool, Isa::Avx2, &w, &xq, n_tokens, &mut a);
                matmul(&pool, Isa::AvxVnni, &w, &xq, n_tokens, &mut b);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "{ty} tokens {n_tokens}");
            }
        }
    }

    /// The AMX tier's Q6_K values `(q - 32) · sc` split into two bytes, at their extremes: 4096
    /// (q 0, scale -128), -4064 (q 0, scale 127), -3968 (q 63, scale -128) and 3937 (q 63,
    /// scale 127), against activations at -128 and 127, in tiles of tokens and in decode.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn amx_q6k_extremes_match_reference() {
        if !Isa::Amx.is_supported() {
            return;
        }
        let (ty, n, n_out) = (GgmlType::Q6_K, 512, 48);
        let rb = row_bytes(ty, n);
        let mut data = vec![0u8; n_out * rb];
        for (r, row) in data.chunks_exact_mut(rb).enumerate() {
            let (q_bits, sc) = [(0u8, -128i8), (0, 127), (0xff, -128), (0xff, 127)][r % 4];
            // ql[128] and qh[64] (all bits set: q 63), scales[16], f16 d.
            for b in row.chunks_exact_mut(210) {
                b[..192].fill(q_bits);
                b[192..208].fill(sc as u8);
                b[208..210].copy_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
            }
        }
        let (pk, packed_rows) = packed_copy(ty, n, &data);
        let w = matrix(ty, n, &pk, packed_rows);
        let pool = ThreadPool::new(2).unwrap();
        // Decode, a batch off the tiles, and one on them with 3 tokens past its last tile.
        for n_tokens in [1, 35, crate::kernels::x86::amx::MIN_TOKENS + 3] {
            // Q8_K: f32 d, qs[256], bsums[16] (i16 sums of 16 quants).
            let mut xq = Vec::new();
            for t in 0..n_tokens {
                let v: i8 = if t % 3 == 0 { 127 } else { -128 };
                for _ in 0..n / 256 {
                    xq.extend(1f32.to_le_bytes());
                    xq.extend([v as u8; 256]);
                    for _ in 0..16 {
                        xq.extend((16 * i16::from(v)).to_le_bytes());
                    }
                }
            }
            let mut got = vec![f32::NAN; n_out * n_tokens];
            matmul(&pool, Isa::Amx, &w, &xq, n_tokens, &mut got);
            assert_matches_reference(ty, n, &data, &xq, &got, &format!("amx tokens={n_tokens}"));
        }
    }

    /// Matrices of the given `(type, rows)` shapes and `n` columns over `data`, the first
    /// `packed_rows[i]` rows of matrix `i` packed.
    fn matrices<'a>(
        shapes: &[(GgmlType, usize)],
        n: usize,
        data: &'a [Vec<u8>],
        packed_rows: &[usize],
    ) -> Vec<Matrix<'a>> {
        shapes
            .iter()
            .zip(data)
            .zip(packed_rows)
            .map(|((&(ty, _), d), &packed_rows)| matrix(ty, n, d, packed_rows))
            .collect()
    }

    /// The matrix of `ty` rows of `n` values in `data`, the first `packed_rows` packed.
    fn matrix(ty: GgmlType, n: usize, data: &[u8], packed_rows: usize) -> Matrix<'_> {
        let rb = row_bytes(ty, n);
        Matrix {
            ty,
            n,
            n_out: data.len() / rb,
            row_bytes: rb,
            data,
            packed_rows,
        }
    }

    /// A copy of the row-major `data` (rows of `n` values of `ty`) with every whole group of 16
    /// rows packed, and how many rows that is.
    fn packed_copy(ty: GgmlType, n: usize, data: &[u8]) -> (Vec<u8>, usize) {
        let mut pk = data.to_vec();
        let rows = data.len() / row_bytes(ty, n);
        let packed_rows = crate::kernels::packed::pack_in_place(ty, n, &mut pk, rows, &mut Vec::new());
        (pk, packed_rows)
    }

    /// Fused products (different types and sizes, as Q/K/V of a real model; packed where the
    /// tier has packed kernels, with a row-major tail) give each matrix's own result, on the
    /// fused decode step and on the one-by-one batch path.
    #[test]
    fn matmul_many_matches_one_by_one() {
        use crate::kernels::packed;
        let pool = ThreadPool::new(3).unwrap();
        let mut rng = Rng::new(11);
        let n = 256;
        let shapes = [(GgmlType::Q5_0, 70), (GgmlType::Q8_0, 16), (GgmlType::Q4_K, 33)];
        for isa in Isa::supported() {
            for n_tokens in [1, 2, GEMM_MIN_TOKENS + 1] {
                let data: Vec<Vec<u8>> = shapes
                    .iter()
                    .map(|&(ty, r)| random_rows(&mut rng, ty, n, r))
                    .collect();
                let xq: Vec<Vec<u8>> = shapes
                    .iter()
                    .map(|&(ty, _)| {
                        (0..n_tokens)
                            .flat_map(|_| random_act(&mut rng, ty, n).1)
                            .collect()
                    })
                    .collect();
                let mats = matrices(&shapes, n, &data, &[0; 3]);
                let mut want: Vec<Vec<f32>> = mats.iter().map(|m| vec![0f32; m.n_out * n_tokens]).collect();
                for ((m, x), o) in mats.iter().zip(&xq).zip(&mut want) {
                    for t in 0..n_tokens {
                        let a = &x[t * x.len() / n_tokens..(t + 1) * x.len() / n_tokens];
                        dot_rows(
                            isa,
                            m.ty,
                            n,
                            m.data,
                            m.row_bytes,
                            a,
                            &mut o[t * m.n_out..(t + 1) * m.n_out],
                        );
                    }
                }
                // The first and last matrices packed (skipping the middle one), where possible.
                let mut pk = data.clone();
                let mut fused = mats.clone();
                for i in [0, 2] {
                    if can_use_packed(isa, fused[i].ty) {
                        let (ty, n_out) = shapes[i];
                        fused[i].packed_rows =
                            packed::pack_in_place(ty, n, &mut pk[i], n_out, &mut Vec::new());
                    }
                }
                for (m, d) in fused.iter_mut().zip(&pk) {
                    m.data = d;
                }
                let mut got: Vec<Vec<f32>> =
                    mats.iter().map(|m| vec![f32::NAN; m.n_out * n_tokens]).collect();
                let mut products: Vec<Product> = fused
                    .iter()
                    .zip(&xq)
                    .zip(&mut got)
                    .map(|((m, x), o)| Product { w: *m, xq: x, out: o })
                    .collect();
                matmul_many(&pool, isa, n_tokens, &mut products);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    for (j, (a, b)) in g.iter().zip(w).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-4 * b.abs().max(0.05),
                            "{isa} tokens={n_tokens} product {i} [{j}]: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// Products of one weight type on the same activations (Q and K; gate and up) share their
    /// side data, next to one of another type (a Q6_K V): the fused step gives every product the
    /// bits it gets alone, for decode, a few tokens and a batch.
    #[test]
    fn products_sharing_activations_match_each_alone() {
        use crate::kernels::packed;
        let pool = ThreadPool::new(3).unwrap();
        let mut rng = Rng::new(17);
        let n = 512;
        let shapes = [(GgmlType::Q4_K, 48), (GgmlType::Q4_K, 32), (GgmlType::Q6_K, 32)];
        for isa in Isa::supported() {
            // 37 tokens: the AMX tier's Q6_K tiles of 16 (a pair and 5 past them).
            for n_tokens in [1, 3, GEMM_MIN_TOKENS + 5, 37] {
                // Q4_K and Q6_K both take Q8_K activations: one buffer for all three.
                let xq: Vec<u8> = (0..n_tokens)
                    .flat_map(|_| random_act(&mut rng, GgmlType::Q4_K, n).1)
                    .collect();
                let mut data: Vec<Vec<u8>> = shapes
                    .iter()
                    .map(|&(ty, r)| random_rows(&mut rng, ty, n, r))
                    .collect();
                let packed_rows: Vec<usize> = shapes
                    .iter()
                    .zip(&mut data)
                    .map(|(&(ty, r), d)| {
                        if can_use_packed(isa, ty) {
                            packed::pack_in_place(ty, n, d, r, &mut Vec::new())
                        } else {
                            0
                        }
                    })
                    .collect();
                let mats = matrices(&shapes, n, &data, &packed_rows);
                let alone: Vec<Vec<f32>> = mats
                    .iter()
                    .map(|m| {
                        let mut o = vec![f32::NAN; m.n_out * n_tokens];
                        matmul(&pool, isa, m, &xq, n_tokens, &mut o);
                        o
                    })
                    .collect();
                let mut fused: Vec<Vec<f32>> =
                    mats.iter().map(|m| vec![f32::NAN; m.n_out * n_tokens]).collect();
                let mut products: Vec<Product> = mats
                    .iter()
                    .zip(&mut fused)
                    .map(|(m, o)| Product {
                        w: *m,
                        xq: &xq,
                        out: o,
                    })
                    .collect();
                matmul_many(&pool, isa, n_tokens, &mut products);
                for (i, (f, a)) in fused.iter().zip(&alone).enumerate() {
                    let same = f.iter().zip(a).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{isa} tokens={n_tokens} product {i}");
                }
            }
        }
    }

    /// Every type, every tier: the batched paths (panel GEMM and chunked rows) against the
    /// reference dot product of each row with each token.
    #[test]
    fn matmul_matches_reference_dots() {
        let pool = ThreadPool::new(3).unwrap();
        let mut rng = Rng::new(5);
        for ty in WEIGHT_TYPES {
            let n = if ty.block_size() == 256 { 512 } else { 96 };
            for n_out in [1, 15, 16, 37] {
                for n_tokens in [1, 3, GEMM_MIN_TOKENS, 13] {
                    let data = random_rows(&mut rng, ty, n, n_out);
                    let rb = row_bytes(ty, n);
                    let mut xq = Vec::new();
                    for _ in 0..n_tokens {
                        xq.extend(random_act(&mut rng, ty, n).1);
                    }
                    let arb = row_bytes(vec_dot_type(ty), n);
                    let m = Matrix {
                        ty,
                        n,
                        n_out,
                        row_bytes: rb,
                        data: &data,
                        packed_rows: 0,
                    };
                    for isa in Isa::supported() {
                        let mut out = vec![f32::NAN; n_out * n_tokens];
                        matmul(&pool, isa, &m, &xq, n_tokens, &mut out);
                        for t in 0..n_tokens {
                            for r in 0..n_out {
                                let a = &xq[t * arb..(t + 1) * arb];
                                let want = quant::vec_dot(ty, n, &data[r * rb..(r + 1) * rb], a);
                                let got = out[t * n_out + r];
                                let mut mag = vec![0f32; n];
                                quant::dequantize_row(ty, &data[r * rb..(r + 1) * rb], &mut mag).unwrap();
                                let scale: f32 = mag.iter().map(|v| v.abs()).sum::<f32>() * 4.0;
                                assert!(
                                    (got - want).abs() <= 1e-5 * scale.max(1e-3),
                                    "{isa} {ty} n_out={n_out} tokens={n_tokens} t={t} r={r}: {got} vs {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
