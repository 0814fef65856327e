//! Kernels of the attention step over a block of KV cells, with the queries of a tile in SIMD
//! lanes: scores as an f32 micro-GEMM (queries x cells), the softmax statistics and weights with a
//! vectorized exp, and the weighted sum of the value rows.
//!
//! Every tier performs, per query and per output value, the same IEEE operations in the same order
//! as the scalar code here (each score is a chain of fused multiply-adds over the head dimension in
//! index order; each output value a chain of fused multiply-adds over the cells in ascending order;
//! [`exp_neg`](super::exp::exp_neg) is a polynomial of fused multiply-adds), so the tiers give the same bits, and a
//! query gives the same bits whatever tile it is evaluated in.
//!
//! Layouts: `qt[d * nqp + i]` is value `d` of query `i` (transposed, `nqp` a multiple of [`LANES`],
//! padding queries zero); `k[c * dk + d]` / `v[c * dvp + e]` the f32 key / value rows of the
//! block's cells (`dvp` a multiple of [`LANES`]); `s[c * nqp + i]` the scores or weights.

#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use super::exp::exp_neg;
use super::Isa;

/// Queries are padded to a multiple of this many lanes (one AVX-512 vector, two AVX2 ones).
pub const LANES: usize = 16;

/// `s[c * nqp + i] = sum_d qt[d * nqp + i] * k[c * dk + d]` for `nc` cells (fused multiply-adds in
/// `d` order from 0).
pub fn scores(isa: Isa, qt: &[f32], nqp: usize, k: &[f32], dk: usize, nc: usize, s: &mut [f32]) {
    assert!(
        nqp.is_multiple_of(LANES) && s.len() >= nc * nqp,
        "attn: score block layout"
    );
    assert!(qt.len() >= dk * nqp && k.len() >= nc * dk, "attn: scores sizes");
    match isa {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::scores_avx512(qt.as_ptr(), nqp, k.as_ptr(), dk, nc, s.as_mut_ptr()) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::scores_avx2(qt.as_ptr(), nqp, k.as_ptr(), dk, nc, s.as_mut_ptr()) },
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

/// One block's update of the online softmax statistics of each query lane: with `mb` the block's
/// maximum and `m' = max(m, mb)`, `l = l * e^(m - m') + sum_c e^(s_c - m')` (the sum in cell order)
/// and `m = m'`; lanes whose `m'` is -inf (nothing visible yet) keep their values.
pub fn block_stats(isa: Isa, s: &[f32], nqp: usize, nc: usize, m: &mut [f32], l: &mut [f32]) {
    assert!(nqp.is_multiple_of(LANES) && s.len() >= nc * nqp && m.len() >= nqp && l.len() >= nqp);
    match isa {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::stats_avx512(s.as_ptr(), nqp, nc, m.as_mut_ptr(), l.as_mut_ptr()) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::stats_avx2(s.as_ptr(), nqp, nc, m.as_mut_ptr(), l.as_mut_ptr()) },
        _ => {
            for i in 0..nqp {
                let mb = (0..nc).fold(f32::NEG_INFINITY, |a, c| a.max(s[c * nqp + i]));
                let mn = m[i].max(mb);
                if mn == f32::NEG_INFINITY {
                    continue;
                }
                let mut sum = 0f32;
                for c in 0..nc {
                    sum += exp_neg(s[c * nqp + i] - mn);
                }
                l[i] = l[i] * exp_neg(m[i] - mn) + sum;
                m[i] = mn;
            }
        }
    }
}

/// Softmax weights in place: `s = e^(s - m) * inv` per lane, rounded to f16 (and back) when
/// `round_f16` (as llama.cpp weights an F16 value cache).
pub fn weights(isa: Isa, s: &mut [f32], nqp: usize, nc: usize, m: &[f32], inv: &[f32], round_f16: bool) {
    assert!(nqp.is_multiple_of(LANES) && s.len() >= nc * nqp && m.len() >= nqp && inv.len() >= nqp);
    match isa {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe {
            x86::weights_avx512(s.as_mut_ptr(), nqp, nc, m.as_ptr(), inv.as_ptr(), round_f16)
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe {
            x86::weights_avx2(s.as_mut_ptr(), nqp, nc, m.as_ptr(), inv.as_ptr(), round_f16)
        },
        _ => {
            for row in s[..nc * nqp].chunks_exact_mut(nqp) {
                for (i, x) in row.iter_mut().enumerate() {
                    *x = weight(*x, m[i], inv[i], round_f16);
                }
            }
        }
    }
}

/// The softmax weight of one score (what [`weights`] computes per lane).
#[inline]
pub fn weight(s: f32, m: f32, inv: f32, round_f16: bool) -> f32 {
    let p = exp_neg(s - m) * inv;
    if round_f16 {
        half::f16::from_f32(p).to_f32()
    } else {
        p
    }
}

/// `acc[i * dvp + e] += p[c * nqp + i] * v[c * dvp + e]` for the first `nq` queries, over the `nc`
/// cells in ascending order (fused multiply-adds), skipping zero weights.
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
    assert!(nqp.is_multiple_of(LANES) && dvp.is_multiple_of(LANES) && nq <= nqp);
    assert!(p.len() >= nc * nqp && v.len() >= nc * dvp && acc.len() >= nq * dvp);
    match isa {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe {
            x86::values_avx512(p.as_ptr(), nqp, nq, v.as_ptr(), dvp, nc, acc.as_mut_ptr())
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::values_avx2(p.as_ptr(), nqp, nq, v.as_ptr(), dvp, nc, acc.as_mut_ptr()) },
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

/// Converts a row of little-endian f16 values to f32 (exact on every tier).
pub fn f16_row(isa: Isa, src: &[u8], dst: &mut [f32]) {
    assert!(src.len() >= 2 * dst.len(), "attn: f16 row too short");
    let n = dst.len();
    let done = match isa {
        // SAFETY: the tier is the active one (supported), and the sizes are checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx2 => unsafe { x86::f16_row(src.as_ptr(), dst.as_mut_ptr(), n) },
        _ => 0,
    };
    for (d, b) in dst[done..].iter_mut().zip(src[2 * done..].chunks_exact(2)) {
        *d = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::kernels::exp::x86::{exp256, exp512};

    // ----- AVX-512: one vector of 16 query lanes.

    #[inline(always)]
    unsafe fn scores512<const Q: usize, const CC: usize>(
        qt: *const f32,
        nqp: usize,
        k: *const f32,
        dk: usize,
        s: *mut f32,
        j: usize,
        c: usize,
    ) {
        let mut acc = [[_mm512_setzero_ps(); CC]; Q];
        for d in 0..dk {
            let mut q = [_mm512_setzero_ps(); Q];
            for a in 0..Q {
                q[a] = _mm512_loadu_ps(qt.add(d * nqp + j + 16 * a));
            }
            for b in 0..CC {
                let kv = _mm512_set1_ps(*k.add((c + b) * dk + d));
                for a in 0..Q {
                    acc[a][b] = _mm512_fmadd_ps(q[a], kv, acc[a][b]);
                }
            }
        }
        for a in 0..Q {
            for b in 0..CC {
                _mm512_storeu_ps(s.add((c + b) * nqp + j + 16 * a), acc[a][b]);
            }
        }
    }

    #[inline(always)]
    unsafe fn scores512_q<const Q: usize>(
        qt: *const f32,
        nqp: usize,
        k: *const f32,
        dk: usize,
        nc: usize,
        s: *mut f32,
        j: usize,
    ) {
        let mut c = 0;
        while c + 4 <= nc {
            scores512::<Q, 4>(qt, nqp, k, dk, s, j, c);
            c += 4;
        }
        while c < nc {
            scores512::<Q, 1>(qt, nqp, k, dk, s, j, c);
            c += 1;
        }
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn scores_avx512(
        qt: *const f32,
        nqp: usize,
        k: *const f32,
        dk: usize,
        nc: usize,
        s: *mut f32,
    ) {
        let mut j = 0;
        while j < nqp {
            match (nqp - j) / 16 {
                1 => scores512_q::<1>(qt, nqp, k, dk, nc, s, j),
                2 => scores512_q::<2>(qt, nqp, k, dk, nc, s, j),
                3 => scores512_q::<3>(qt, nqp, k, dk, nc, s, j),
                _ => scores512_q::<4>(qt, nqp, k, dk, nc, s, j),
            }
            j += ((nqp - j) / 16).min(4) * 16;
        }
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn stats_avx512(s: *const f32, nqp: usize, nc: usize, m: *mut f32, l: *mut f32) {
        for j in (0..nqp).step_by(16) {
            let mut mb = _mm512_set1_ps(f32::NEG_INFINITY);
            for c in 0..nc {
                mb = _mm512_max_ps(mb, _mm512_loadu_ps(s.add(c * nqp + j)));
            }
            let m0 = _mm512_loadu_ps(m.add(j));
            let mn = _mm512_max_ps(m0, mb);
            let mut sum = _mm512_setzero_ps();
            for c in 0..nc {
                sum = _mm512_add_ps(
                    sum,
                    exp512(_mm512_sub_ps(_mm512_loadu_ps(s.add(c * nqp + j)), mn)),
                );
            }
            let l0 = _mm512_loadu_ps(l.add(j));
            let ln = _mm512_add_ps(_mm512_mul_ps(l0, exp512(_mm512_sub_ps(m0, mn))), sum);
            let live = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(mn, _mm512_set1_ps(f32::NEG_INFINITY));
            _mm512_storeu_ps(l.add(j), _mm512_mask_mov_ps(l0, live, ln));
            _mm512_storeu_ps(m.add(j), _mm512_mask_mov_ps(m0, live, mn));
        }
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn weights_avx512(
        s: *mut f32,
        nqp: usize,
        nc: usize,
        m: *const f32,
        inv: *const f32,
        round_f16: bool,
    ) {
        for j in (0..nqp).step_by(16) {
            let (mv, iv) = (_mm512_loadu_ps(m.add(j)), _mm512_loadu_ps(inv.add(j)));
            for c in 0..nc {
                let p = s.add(c * nqp + j);
                let mut w = _mm512_mul_ps(exp512(_mm512_sub_ps(_mm512_loadu_ps(p), mv)), iv);
                if round_f16 {
                    w = _mm512_cvtph_ps(
                        _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(w),
                    );
                }
                _mm512_storeu_ps(p, w);
            }
        }
    }

    /// Queries `i..i + Q` x values `e0..e0 + 16 * E`: each cell's value vectors are loaded once
    /// for the `Q` queries (a cell's weights are next to each other in `p`). Per query and value,
    /// the same fused multiply-adds as the scalar code, in the same order, zero weights skipped.
    #[inline(always)]
    unsafe fn values512<const Q: usize, const E: usize>(
        p: *const f32,
        nqp: usize,
        i: usize,
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
        e0: usize,
    ) {
        let mut a = [[_mm512_setzero_ps(); E]; Q];
        for q in 0..Q {
            for x in 0..E {
                a[q][x] = _mm512_loadu_ps(acc.add((i + q) * dvp + e0 + 16 * x));
            }
        }
        for c in 0..nc {
            let w = p.add(c * nqp + i);
            let live = (0..Q).fold(0u32, |m, q| m | u32::from(*w.add(q) != 0.0) << q);
            if live == 0 {
                continue;
            }
            let mut vv = [_mm512_setzero_ps(); E];
            for x in 0..E {
                vv[x] = _mm512_loadu_ps(v.add(c * dvp + e0 + 16 * x));
            }
            for q in 0..Q {
                if live >> q & 1 != 0 {
                    let wv = _mm512_set1_ps(*w.add(q));
                    for x in 0..E {
                        a[q][x] = _mm512_fmadd_ps(wv, vv[x], a[q][x]);
                    }
                }
            }
        }
        for q in 0..Q {
            for x in 0..E {
                _mm512_storeu_ps(acc.add((i + q) * dvp + e0 + 16 * x), a[q][x]);
            }
        }
    }

    /// Queries `i..i + Q` over all values, in chunks of up to 4 vectors.
    #[inline(always)]
    unsafe fn values512_rows<const Q: usize>(
        p: *const f32,
        nqp: usize,
        i: usize,
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        let mut e0 = 0;
        while e0 < dvp {
            let e = ((dvp - e0) / 16).min(4);
            match e {
                1 => values512::<Q, 1>(p, nqp, i, v, dvp, nc, acc, e0),
                2 => values512::<Q, 2>(p, nqp, i, v, dvp, nc, acc, e0),
                3 => values512::<Q, 3>(p, nqp, i, v, dvp, nc, acc, e0),
                _ => values512::<Q, 4>(p, nqp, i, v, dvp, nc, acc, e0),
            }
            e0 += e * 16;
        }
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
        let mut i = 0;
        while i + 4 <= nq {
            values512_rows::<4>(p, nqp, i, v, dvp, nc, acc);
            i += 4;
        }
        while i < nq {
            values512_rows::<1>(p, nqp, i, v, dvp, nc, acc);
            i += 1;
        }
    }

    // ----- AVX2: vectors of 8 query lanes.

    #[inline(always)]
    unsafe fn scores256<const Q: usize, const CC: usize>(
        qt: *const f32,
        nqp: usize,
        k: *const f32,
        dk: usize,
        s: *mut f32,
        j: usize,
        c: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); CC]; Q];
        for d in 0..dk {
            let mut q = [_mm256_setzero_ps(); Q];
            for a in 0..Q {
                q[a] = _mm256_loadu_ps(qt.add(d * nqp + j + 8 * a));
            }
            for b in 0..CC {
                let kv = _mm256_set1_ps(*k.add((c + b) * dk + d));
                for a in 0..Q {
                    acc[a][b] = _mm256_fmadd_ps(q[a], kv, acc[a][b]);
                }
            }
        }
        for a in 0..Q {
            for b in 0..CC {
                _mm256_storeu_ps(s.add((c + b) * nqp + j + 8 * a), acc[a][b]);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn scores_avx2(qt: *const f32, nqp: usize, k: *const f32, dk: usize, nc: usize, s: *mut f32) {
        for j in (0..nqp).step_by(16) {
            let mut c = 0;
            while c + 4 <= nc {
                scores256::<2, 4>(qt, nqp, k, dk, s, j, c);
                c += 4;
            }
            while c < nc {
                scores256::<2, 1>(qt, nqp, k, dk, s, j, c);
                c += 1;
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn stats_avx2(s: *const f32, nqp: usize, nc: usize, m: *mut f32, l: *mut f32) {
        for j in (0..nqp).step_by(8) {
            let mut mb = _mm256_set1_ps(f32::NEG_INFINITY);
            for c in 0..nc {
                mb = _mm256_max_ps(mb, _mm256_loadu_ps(s.add(c * nqp + j)));
            }
            let m0 = _mm256_loadu_ps(m.add(j));
            let mn = _mm256_max_ps(m0, mb);
            let mut sum = _mm256_setzero_ps();
            for c in 0..nc {
                sum = _mm256_add_ps(
                    sum,
                    exp256(_mm256_sub_ps(_mm256_loadu_ps(s.add(c * nqp + j)), mn)),
                );
            }
            let l0 = _mm256_loadu_ps(l.add(j));
            let ln = _mm256_add_ps(_mm256_mul_ps(l0, exp256(_mm256_sub_ps(m0, mn))), sum);
            let live = _mm256_cmp_ps::<_CMP_NEQ_OQ>(mn, _mm256_set1_ps(f32::NEG_INFINITY));
            _mm256_storeu_ps(l.add(j), _mm256_blendv_ps(l0, ln, live));
            _mm256_storeu_ps(m.add(j), _mm256_blendv_ps(m0, mn, live));
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn weights_avx2(
        s: *mut f32,
        nqp: usize,
        nc: usize,
        m: *const f32,
        inv: *const f32,
        round_f16: bool,
    ) {
        for j in (0..nqp).step_by(8) {
            let (mv, iv) = (_mm256_loadu_ps(m.add(j)), _mm256_loadu_ps(inv.add(j)));
            for c in 0..nc {
                let p = s.add(c * nqp + j);
                let mut w = _mm256_mul_ps(exp256(_mm256_sub_ps(_mm256_loadu_ps(p), mv)), iv);
                if round_f16 {
                    w = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(w));
                }
                _mm256_storeu_ps(p, w);
            }
        }
    }

    /// Queries `i..i + Q` x values `e0..e0 + 8 * E`, as [`values512`].
    #[inline(always)]
    unsafe fn values256<const Q: usize, const E: usize>(
        p: *const f32,
        nqp: usize,
        i: usize,
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
        e0: usize,
    ) {
        let mut a = [[_mm256_setzero_ps(); E]; Q];
        for q in 0..Q {
            for x in 0..E {
                a[q][x] = _mm256_loadu_ps(acc.add((i + q) * dvp + e0 + 8 * x));
            }
        }
        for c in 0..nc {
            let w = p.add(c * nqp + i);
            let live = (0..Q).fold(0u32, |m, q| m | u32::from(*w.add(q) != 0.0) << q);
            if live == 0 {
                continue;
            }
            let mut vv = [_mm256_setzero_ps(); E];
            for x in 0..E {
                vv[x] = _mm256_loadu_ps(v.add(c * dvp + e0 + 8 * x));
            }
            for q in 0..Q {
                if live >> q & 1 != 0 {
                    let wv = _mm256_set1_ps(*w.add(q));
                    for x in 0..E {
                        a[q][x] = _mm256_fmadd_ps(wv, vv[x], a[q][x]);
                    }
                }
            }
        }
        for q in 0..Q {
            for x in 0..E {
                _mm256_storeu_ps(acc.add((i + q) * dvp + e0 + 8 * x), a[q][x]);
            }
        }
    }

    /// Queries `i..i + Q` over all values (`dvp` is a multiple of 16: chunks of 4 or 2 vectors).
    #[inline(always)]
    unsafe fn values256_rows<const Q: usize>(
        p: *const f32,
        nqp: usize,
        i: usize,
        v: *const f32,
        dvp: usize,
        nc: usize,
        acc: *mut f32,
    ) {
        let mut e0 = 0;
        while e0 < dvp {
            if (dvp - e0) / 8 >= 4 {
                values256::<Q, 4>(p, nqp, i, v, dvp, nc, acc, e0);
                e0 += 32;
            } else {
                values256::<Q, 2>(p, nqp, i, v, dvp, nc, acc, e0);
                e0 += 16;
            }
        }
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
        let mut i = 0;
        while i + 2 <= nq {
            values256_rows::<2>(p, nqp, i, v, dvp, nc, acc);
            i += 2;
        }
        if i < nq {
            values256_rows::<1>(p, nqp, i, v, dvp, nc, acc);
        }
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
}
