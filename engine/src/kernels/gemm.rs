//! Matrix x matrix for batches of tokens (prompt processing).
//!
//! Weights stay in the file's layout. For each panel of 16 weight rows the kernel first *expands*
//! the rows into a small interleaved buffer (signed 8-bit values, four of each row in turn, plus one
//! f32 scale, and for some formats one f32 minimum, per row and sub-block), then runs one
//! register-tiled micro-kernel over every token of the batch: each 64-byte load of the panel feeds
//! 16 rows x up to 8 tokens of integer dot products (VNNI `vpdpbusd` with the token's four
//! activation bytes broadcast, or NEON `sdot` by lane). The expansion is paid once per panel and
//! spread over all tokens, so one micro-kernel serves every weight type.
//!
//! Per sub-block of `S` elements (32, or 16 for Q2_K/Q3_K/Q6_K), row `r` and token `t`:
//! `out += s_r * d_t * Σ v_i a_i  -  m_r * msum_t`, where `v_i` are the expanded values,
//! `d_t` the activation scale and `msum_t` the activation sum term of that sub-block. This is the
//! same integer sum per sub-block as the reference, scaled in f32.
//!
//! The panels also keep the K-quants' integer sub-block scales and minimums and their super-block
//! `d` and `dmin` ([`Expansion::int_scales`]): NEON's micro-kernel sums a super-block in integers
//! and scales it once, as its row kernels do, so that a token gets the same bits in a batch as
//! alone (the x86 tiers get that from their packed kernels instead).

use std::sync::Mutex;

use super::blocks::IQ4NL_VALUES;
use crate::quant::blocks::{q3_k_scales, scale_min_k4};
use crate::quant::GgmlType;
use crate::threads::ThreadPool;

/// Weight rows per panel.
pub const PANEL_ROWS: usize = 16;

/// How a weight type expands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expansion {
    /// Elements per sub-block (one scale per row and sub-block).
    pub sub: usize,
    /// Whether rows have a per-sub-block minimum (`w = s*v + m` or `s*v - m`).
    pub has_min: bool,
    /// `(off, max)` when every value plus `off` lies in `0..=max` with `max` below 64: AVX2
    /// then multiplies the stored values as unsigned bytes directly (no sign trick) and sums a
    /// few steps' `maddubs` pairs in i16 before widening (see [`Expansion::i16_steps`]).
    pub unsigned: Option<(i8, u8)>,
    /// Whether each sub-block's scale (and minimum) is a small integer times its super-block's
    /// `d` (and `dmin`): the K-quants and IQ4_XS, 256 elements per super-block.
    pub int_scales: bool,
}

impl Expansion {
    /// Steps whose `maddubs` pair sums (each at most `2 * max * 128` in magnitude) an i16 lane
    /// can add up without saturating, at most a sub-block's steps; 0 for signed values.
    pub fn i16_steps(self) -> usize {
        self.unsigned.map_or(0, |(_, max)| {
            (i16::MAX as usize / (256 * usize::from(max))).min(self.sub / 4)
        })
    }
}

/// Whether `ty` has a GEMM expansion, and its shape.
pub fn expansion(ty: GgmlType) -> Option<Expansion> {
    use GgmlType::*;
    let (sub, has_min, unsigned) = match ty {
        Q8_0 | IQ4_NL | IQ4_XS => (32, false, None),
        Q4_0 => (32, false, Some((8, 15))),
        Q5_0 => (32, false, Some((16, 31))),
        Q4_1 | Q4_K => (32, true, Some((0, 15))),
        Q5_1 | Q5_K => (32, true, Some((0, 31))),
        Q6_K => (16, false, Some((32, 63))),
        Q3_K => (16, false, Some((4, 7))),
        Q2_K => (16, true, Some((0, 3))),
        _ => return None,
    };
    Some(Expansion {
        sub,
        has_min,
        unsigned,
        int_scales: ty.block_size() == 256,
    })
}

/// One expanded panel: `vals[j][k][r][4]` (sub-block `j`, step `k` of four elements, row `r`),
/// `scales[j][r]`, `mins[j][r]`; for [`Expansion::int_scales`] types also `iscales[j][r]`,
/// `imins[j][r]` (the integers) and `sb_d[s][r]`, `sb_dmin[s][r]` (super-block `s`), with
/// `scales[j][r] = sb_d[s][r] * iscales[j][r]` for the sub-blocks `j` of `s`. Rows past the
/// matrix's end have zero values and scales.
#[derive(Default)]
pub struct Panel {
    pub vals: Vec<i8>,
    pub scales: Vec<f32>,
    pub mins: Vec<f32>,
    pub iscales: Vec<i32>,
    pub imins: Vec<i32>,
    pub sb_d: Vec<f32>,
    pub sb_dmin: Vec<f32>,
    pub n_sub: usize,
}

impl Panel {
    pub fn new() -> Panel {
        Panel::default()
    }
}

/// A sub-block's scale and minimum as its block states them.
enum SubScale {
    /// The 32-element formats: an f16 scale (and minimum) per block.
    Float { s: f32, m: f32 },
    /// The K-quants: integers times the super-block's `d` and `dmin`.
    Int { d: f32, dmin: f32, s: i32, m: i32 },
}

#[inline]
fn f16(b: &[u8], o: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]])).to_f32()
}

/// Expands rows `rows` (at most [`PANEL_ROWS`]) of `n` elements of type `ty`; row `r` is
/// `w[r * row_bytes..]`. The values are stored plus `off` (wrapping): 0 for signed bytes, -128
/// for VNNI's unsigned x signed products (values plus 128), or the type's
/// [`Expansion::unsigned`] offset.
pub fn expand(ty: GgmlType, n: usize, w: &[u8], row_bytes: usize, rows: usize, off: i8, p: &mut Panel) {
    let e = expansion(ty).expect("type has an expansion");
    assert!(rows <= PANEL_ROWS);
    let n_sub = n / e.sub;
    p.n_sub = n_sub;
    p.vals.clear();
    p.vals.resize(n * PANEL_ROWS, off);
    p.scales.clear();
    p.scales.resize(n_sub * PANEL_ROWS, 0.0);
    p.mins.clear();
    if e.has_min {
        p.mins.resize(n_sub * PANEL_ROWS, 0.0);
    }
    // Sub-blocks and super-blocks with integer scales (none for the 32-element formats).
    let (n_int, n_sb) = if e.int_scales { (n_sub, n / 256) } else { (0, 0) };
    let (n_imin, n_sbmin) = if e.has_min { (n_int, n_sb) } else { (0, 0) };
    p.iscales.clear();
    p.iscales.resize(n_int * PANEL_ROWS, 0);
    p.imins.clear();
    p.imins.resize(n_imin * PANEL_ROWS, 0);
    p.sb_d.clear();
    p.sb_d.resize(n_sb * PANEL_ROWS, 0.0);
    p.sb_dmin.clear();
    p.sb_dmin.resize(n_sbmin * PANEL_ROWS, 0.0);
    let bb = ty.type_size() as usize;
    let bs = ty.block_size() as usize;
    // Element `e` of row `r` goes to byte `4 * (16 * (e / 4) + r) + e % 4`: step `e / 4` (sub-block
    // `e / sub`, step `e % sub / 4` within it) holds four values of each row in turn.
    let mut v = [0i8; 256];
    for r in 0..rows {
        let row = &w[r * row_bytes..r * row_bytes + n / bs * bb];
        for (bi, b) in row.chunks_exact(bb).enumerate() {
            // Values of this block into `v`, scales/mins per sub-block into the panel.
            let j0 = bi * bs / e.sub;
            block_values(ty, b, &mut v, &mut |j: usize, scale: SubScale| {
                let at = (j0 + j) * PANEL_ROWS + r;
                let (s, m) = match scale {
                    SubScale::Float { s, m } => (s, m),
                    SubScale::Int { d, dmin, s, m } => {
                        p.iscales[at] = s;
                        p.sb_d[bi * PANEL_ROWS + r] = d;
                        if e.has_min {
                            p.imins[at] = m;
                            p.sb_dmin[bi * PANEL_ROWS + r] = dmin;
                        }
                        (d * s as f32, dmin * m as f32)
                    }
                };
                p.scales[at] = s;
                if e.has_min {
                    p.mins[at] = m;
                }
            });
            let steps = &mut p.vals[bi * bs * PANEL_ROWS..(bi + 1) * bs * PANEL_ROWS];
            for (step, q) in steps
                .chunks_exact_mut(4 * PANEL_ROWS)
                .zip(v[..bs].chunks_exact(4))
            {
                let q: [i8; 4] = [q[0], q[1], q[2], q[3]];
                step[4 * r..4 * r + 4].copy_from_slice(&q.map(|x| x.wrapping_add(off)));
            }
        }
    }
}

/// The signed values of one block in element order, with `put(sub, scale)` per sub-block.
fn block_values(ty: GgmlType, b: &[u8], v: &mut [i8; 256], put: &mut impl FnMut(usize, SubScale)) {
    let float = |s: f32, m: f32| SubScale::Float { s, m };
    use GgmlType::*;
    match ty {
        // One loop per type (not one branch per value): each compiles to vector code.
        Q4_0 => {
            for (j, &q) in b[2..18].iter().enumerate() {
                v[j] = (q & 15) as i8 - 8;
                v[j + 16] = (q >> 4) as i8 - 8;
            }
            put(0, float(f16(b, 0), 0.0));
        }
        IQ4_NL => {
            for (j, &q) in b[2..18].iter().enumerate() {
                v[j] = IQ4NL_VALUES[usize::from(q & 15)];
                v[j + 16] = IQ4NL_VALUES[usize::from(q >> 4)];
            }
            put(0, float(f16(b, 0), 0.0));
        }
        Q4_1 => {
            for j in 0..16 {
                v[j] = (b[4 + j] & 15) as i8;
                v[j + 16] = (b[4 + j] >> 4) as i8;
            }
            put(0, float(f16(b, 0), f16(b, 2)));
        }
        Q5_0 | Q5_1 => {
            let o = if ty == Q5_0 { 2 } else { 4 };
            let qh = u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
            let off = if ty == Q5_0 { 16 } else { 0 };
            for j in 0..16 {
                let h0 = ((qh >> j) & 1) as u8;
                let h1 = ((qh >> (j + 16)) & 1) as u8;
                v[j] = ((b[o + 4 + j] & 15) | (h0 << 4)) as i8 - off;
                v[j + 16] = ((b[o + 4 + j] >> 4) | (h1 << 4)) as i8 - off;
            }
            put(0, float(f16(b, 0), if ty == Q5_1 { f16(b, 2) } else { 0.0 }));
        }
        Q8_0 => {
            for j in 0..32 {
                v[j] = b[2 + j] as i8;
            }
            put(0, float(f16(b, 0), 0.0));
        }
        Q4_K | Q5_K => {
            let (d, dmin) = (f16(b, 0), f16(b, 2));
            let sc: &[u8; 12] = b[4..16].try_into().expect("12 bytes");
            let (qh, qs) = if ty == Q5_K {
                (&b[16..48], &b[48..176])
            } else {
                (&b[0..0], &b[16..144])
            };
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, sc);
                // The min enters as `-dmin*m * Σa`: stored positive, subtracted by the kernel.
                put(
                    j,
                    SubScale::Int {
                        d,
                        dmin,
                        s: s.into(),
                        m: m.into(),
                    },
                );
                let (c, hi) = (j / 2, j % 2);
                for l in 0..32 {
                    let q = if hi == 0 {
                        qs[32 * c + l] & 15
                    } else {
                        qs[32 * c + l] >> 4
                    };
                    let h = if ty == Q5_K { ((qh[l] >> j) & 1) << 4 } else { 0 };
                    v[32 * j + l] = (q | h) as i8;
                }
            }
        }
        Q6_K => {
            let d = f16(b, 208);
            for hh in 0..2 {
                let (ql, qh) = (&b[64 * hh..], &b[128 + 32 * hh..]);
                for l in 0..32 {
                    v[128 * hh + l] = ((ql[l] & 15) | ((qh[l] & 3) << 4)) as i8 - 32;
                    v[128 * hh + l + 32] = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                    v[128 * hh + l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                    v[128 * hh + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                }
            }
            for j in 0..16 {
                put(
                    j,
                    SubScale::Int {
                        d,
                        dmin: 0.0,
                        s: (b[192 + j] as i8).into(),
                        m: 0,
                    },
                );
            }
        }
        Q3_K => {
            let d = f16(b, 108);
            let sc = q3_k_scales(b[96..108].try_into().expect("12 bytes"));
            for j in 0..16 {
                put(
                    j,
                    SubScale::Int {
                        d,
                        dmin: 0.0,
                        s: sc[j].into(),
                        m: 0,
                    },
                );
            }
            for hh in 0..2 {
                for j in 0..4 {
                    for l in 0..32 {
                        let q = (b[32 + 32 * hh + l] >> (2 * j)) & 3;
                        let h = (b[l] >> (4 * hh + j)) & 1;
                        v[128 * hh + 32 * j + l] = (q | (h << 2)) as i8 - 4;
                    }
                }
            }
        }
        Q2_K => {
            let (d, dmin) = (f16(b, 80), f16(b, 82));
            for j in 0..16 {
                put(
                    j,
                    SubScale::Int {
                        d,
                        dmin,
                        s: (b[j] & 15).into(),
                        m: (b[j] >> 4).into(),
                    },
                );
            }
            for hh in 0..2 {
                for j in 0..4 {
                    for l in 0..32 {
                        v[128 * hh + 32 * j + l] = ((b[16 + 32 * hh + l] >> (2 * j)) & 3) as i8;
                    }
                }
            }
        }
        IQ4_XS => {
            let d = f16(b, 0);
            let sh = u16::from_le_bytes([b[2], b[3]]);
            for ib in 0..8 {
                let ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | ((((sh >> (2 * ib)) & 3) as u8) << 4);
                put(
                    ib,
                    SubScale::Int {
                        d,
                        dmin: 0.0,
                        s: i32::from(ls) - 32,
                        m: 0,
                    },
                );
                for j in 0..16 {
                    let q = b[8 + 16 * ib + j];
                    v[32 * ib + j] = IQ4NL_VALUES[usize::from(q & 15)];
                    v[32 * ib + 16 + j] = IQ4NL_VALUES[usize::from(q >> 4)];
                }
            }
        }
        _ => unreachable!("no expansion for {ty}"),
    }
}

/// Per-token, per-sub-block activation data the micro-kernels read besides the quants.
pub struct ActSide {
    /// Activation scale of each sub-block (`[t][j]`).
    pub d: Vec<f32>,
    /// `-off · Σa` of each sub-block (`[t][j]`), for kernels whose weight values are stored plus
    /// `off` (unsigned for `vpdpbusd`): an integer sum starts there, with no multiply per use.
    pub osum: Vec<i32>,
    /// `Σa` of each sub-block (`[t][j]`) for [`Expansion::int_scales`] types with minimums,
    /// whose integer minimums NEON's micro-kernel multiplies by it.
    pub sum: Vec<i32>,
    /// What the row minimum is multiplied by, sign included: `-d * Σa` for the K-quants
    /// (`w = s*v - m`), the stored `s = d * Σa` of Q8_1 for Q4_1/Q5_1 (`w = s*v + m`).
    pub msum: Vec<f32>,
    /// Byte offset of each sub-block's quants within a token's activation row.
    pub qoff: Vec<u32>,
    pub n_sub: usize,
}

/// The sum of 32 signed bytes, eight at a time in the 16-bit lanes of a `u64` (each byte plus
/// 128, so unsigned): the compiler's code for the plain sum went a byte at a time for the
/// baseline x86-64 target, 1.7% of a Qwen2.5 0.5B prompt (`perf`, pp512).
fn i8_sum32(q: &[u8]) -> i32 {
    const LOW: u64 = 0x00FF_00FF_00FF_00FF;
    let mut acc = 0u64;
    for w in q.chunks_exact(8) {
        let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) ^ 0x8080_8080_8080_8080;
        acc += (x & LOW) + ((x >> 8) & LOW);
    }
    // Each lane holds at most 4 x 2 x 255 = 2040, all four at most 8160: the multiply adds
    // them into the top 16 bits without a carry out.
    (acc.wrapping_mul(0x0001_0001_0001_0001) >> 48) as i32 - 128 * 32
}

/// Side data for `n_tokens` activation rows (of `row_bytes` each) in `act_ty` for weights of
/// type `ty` with `n` elements per row, whose values the kernel sees plus `off`. Tokens are
/// spread over `pool`: made on one thread, this was 1-2% of a prompt pass, with the other
/// threads waiting for it.
#[allow(clippy::too_many_arguments)]
pub fn act_side(
    pool: &ThreadPool,
    ty: GgmlType,
    act_ty: GgmlType,
    n: usize,
    xq: &[u8],
    row_bytes: usize,
    n_tokens: usize,
    off: i32,
) -> ActSide {
    let e = expansion(ty).expect("type has an expansion");
    let n_sub = n / e.sub;
    let qoff: Vec<u32> = (0..n_sub)
        .map(|j| {
            let e0 = j * e.sub;
            match act_ty {
                GgmlType::Q8_0 => (e0 / 32 * 34 + 2 + e0 % 32) as u32,
                GgmlType::Q8_1 => (e0 / 32 * 36 + 4 + e0 % 32) as u32,
                _ => (e0 / 256 * 292 + 4 + e0 % 256) as u32,
            }
        })
        .collect();
    let n_min = if e.has_min { n_sub } else { 0 };
    let mut d = vec![0f32; n_sub * n_tokens];
    let mut osum = vec![0i32; n_sub * n_tokens];
    let mut msum = vec![0f32; n_min * n_tokens];
    let n_isum = if e.int_scales { n_min } else { 0 };
    let mut isum = vec![0i32; n_isum * n_tokens];
    {
        // Each chunk of tokens fills its own slices (the locks are never contended).
        const TOKENS: usize = 32;
        type Part<'a> = (&'a mut [f32], &'a mut [i32], &'a mut [f32], &'a mut [i32]);
        let parts: Vec<Mutex<Part>> = d
            .chunks_mut(n_sub * TOKENS)
            .zip(osum.chunks_mut(n_sub * TOKENS))
            .zip(
                msum.chunks_mut((n_min * TOKENS).max(1))
                    .chain(std::iter::repeat_with(|| &mut [][..])),
            )
            .zip(
                isum.chunks_mut((n_isum * TOKENS).max(1))
                    .chain(std::iter::repeat_with(|| &mut [][..])),
            )
            .map(|(((d, o), m), i)| Mutex::new((d, o, m, i)))
            .collect();
        pool.for_each_chunk(parts.len(), 1, |chunks| {
            for c in chunks {
                let mut part = parts[c].lock().expect("a chunk of side data");
                let (d, osum, msum, isum) = &mut *part;
                for (i, t) in (c * TOKENS..((c + 1) * TOKENS).min(n_tokens)).enumerate() {
                    let row = &xq[t * row_bytes..(t + 1) * row_bytes];
                    let at = i * n_sub;
                    let mut put = |j: usize, dj: f32, sum: i32, mj: f32| {
                        d[at + j] = dj;
                        osum[at + j] = -off * sum;
                        if n_min > 0 {
                            msum[at + j] = mj;
                        }
                        if n_isum > 0 {
                            isum[at + j] = sum;
                        }
                    };
                    // Straight passes over the row's blocks (the act type's layout), not a
                    // lookup per sub-block: per sub-block offsets, a closure and a match per
                    // value were 1-2% of a prompt (`perf`, pp512).
                    match act_ty {
                        GgmlType::Q8_0 | GgmlType::Q8_1 => {
                            // One block of 32 quants per sub-block: d (f16), Q8_1's stored
                            // `d · Σa` (f16), the quants.
                            debug_assert_eq!(e.sub, 32);
                            let q8_1 = act_ty == GgmlType::Q8_1;
                            let (bytes, head) = if q8_1 { (36, 4) } else { (34, 2) };
                            for (j, blk) in row.chunks_exact(bytes).enumerate() {
                                let sum = i8_sum32(&blk[head..head + 32]);
                                let mj = if q8_1 { f16(blk, 2) } else { 0.0 };
                                put(j, f16(blk, 0), sum, mj);
                            }
                        }
                        _ => {
                            // Q8_K: d (f32), 256 quants, then the i16 sum of each 16 of them
                            // (K-quant sub-blocks are 16 or 32 values: one or two of these).
                            let (per_block, sums) = (256 / e.sub, e.sub / 16);
                            for (b, blk) in row.chunks_exact(292).enumerate() {
                                let dk = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
                                for (s, bs) in blk[260..292].chunks_exact(2 * sums).enumerate() {
                                    let sum = bs
                                        .chunks_exact(2)
                                        .map(|b| i32::from(i16::from_le_bytes([b[0], b[1]])))
                                        .sum();
                                    put(b * per_block + s, dk, sum, -(dk * sum as f32));
                                }
                            }
                        }
                    }
                }
            }
        });
    }
    ActSide {
        d,
        osum,
        sum: isum,
        msum,
        qoff,
        n_sub,
    }
}

/// What a SIMD micro-kernel reads: one expanded panel and the batch's activations.
pub(super) struct Tile<'a> {
    pub panel: &'a Panel,
    pub e: Expansion,
    pub side: &'a ActSide,
    pub xq: &'a [u8],
    pub row_bytes: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::tests::{random_rows, Rng, WEIGHT_TYPES};

    #[test]
    fn i8_sum32_is_the_sum_of_the_signed_bytes() {
        let mut rng = Rng::new(5);
        let mut cases = vec![[0x80u8; 32], [0x7f; 32], [0xff; 32], [0; 32]];
        for _ in 0..200 {
            cases.push(std::array::from_fn(|_| (rng.next() >> 24) as u8));
        }
        for q in cases {
            let want: i32 = q.iter().map(|&b| i32::from(b as i8)).sum();
            assert_eq!(i8_sum32(&q), want, "{q:?}");
        }
    }

    /// What AVX2's unsigned panels rely on: with a type's `unsigned` offset every stored value
    /// lies in `0..=max` (random quant bytes reach every code), and `i16_steps` of `maddubs` pair
    /// sums at that bound fit an i16.
    #[test]
    fn unsigned_panels_stay_in_range() {
        let mut rng = Rng::new(11);
        let mut p = Panel::new();
        for ty in WEIGHT_TYPES {
            let Some(e) = expansion(ty) else { continue };
            let Some((off, max)) = e.unsigned else {
                assert_eq!(e.i16_steps(), 0);
                continue;
            };
            let n = 512;
            let rb = ty.row_bytes(n as u64).unwrap() as usize;
            let data = random_rows(&mut rng, ty, n, PANEL_ROWS);
            expand(ty, n, &data, rb, PANEL_ROWS, off, &mut p);
            let top = p.vals.iter().map(|&v| v as u8).max().unwrap();
            assert!(
                top <= max && p.vals.iter().all(|&v| v >= 0),
                "{ty}: values up to {top}, max {max}"
            );
            let steps = e.i16_steps();
            assert!(
                steps >= 1 && 2 * usize::from(max) * 128 * steps <= i16::MAX as usize,
                "{ty}"
            );
        }
    }
}
