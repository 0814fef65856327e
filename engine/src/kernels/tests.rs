//! Every tier against `crate::quant`'s scalar reference (and against f64 dot products of the
//! dequantized rows), on random data with odd sizes and row counts that are not a multiple of the
//! kernels' row groups.

use half::f16;

use super::*;
use crate::quant;

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    pub(crate) fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

pub(crate) const WEIGHT_TYPES: [GgmlType; 15] = {
    use GgmlType::*;
    [
        F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
    ]
};

/// `x` rounded to f16, as an F16 cache holds it: the rows' bytes, and those converted back to
/// f32 by the scalar kernel (what the tiers that read f16 rows directly must match).
fn rounded_to_f16(x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let bytes: Vec<u8> = x
        .iter()
        .flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes())
        .collect();
    let mut back = vec![0f32; x.len()];
    attn::f16_row(Isa::Scalar, &bytes, &mut back);
    (bytes, back)
}

/// Offsets of the f16 scale fields inside one block of `ty`.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | IQ4_XS => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        _ => &[],
    }
}

/// `rows` random weight rows of `n` values: random bytes for the quants, finite scales.
pub(crate) fn random_rows(rng: &mut Rng, ty: GgmlType, n: usize, rows: usize) -> Vec<u8> {
    let count = n * rows;
    match ty {
        GgmlType::F32 => (0..count).flat_map(|_| rng.f32().to_le_bytes()).collect(),
        GgmlType::F16 => (0..count)
            .flat_map(|_| f16::from_f32(rng.f32()).to_le_bytes())
            .collect(),
        GgmlType::BF16 => (0..count)
            .flat_map(|_| half::bf16::from_f32(rng.f32()).to_le_bytes())
            .collect(),
        _ => {
            let bb = ty.type_size() as usize;
            let mut v = rng.bytes(count / ty.block_size() as usize * bb);
            for block in v.chunks_exact_mut(bb) {
                for &o in f16_fields(ty) {
                    let d = f16::from_f32(rng.f32() * 0.01);
                    block[o..o + 2].copy_from_slice(&d.to_le_bytes());
                }
            }
            v
        }
    }
}

pub(crate) fn random_act(rng: &mut Rng, ty: GgmlType, n: usize) -> (Vec<f32>, Vec<u8>) {
    let x: Vec<f32> = (0..n).map(|_| rng.f32() * 3.0).collect();
    let mut q = vec![0u8; row_bytes(vec_dot_type(ty), n)];
    quant::quantize_activations(vec_dot_type(ty), &x, &mut q).unwrap();
    (x, q)
}

fn close(got: f32, want: f32, scale: f32) -> bool {
    (got - want).abs() <= 2e-5 * scale.max(1e-6)
}

/// Row lengths: one block up to several, including odd block counts.
fn lengths(ty: GgmlType) -> Vec<usize> {
    match ty.block_size() {
        1 => vec![1, 7, 16, 31, 64, 100, 257, 1000],
        32 => vec![32, 96, 160, 640, 896, 1056],
        _ => vec![256, 768, 1280, 2048],
    }
}

/// A tier's `dot_rows` against the reference `quant::vec_dot` and the f64 dot product, for every
/// weight type.
fn check_tier(isa: Isa, dot: impl Fn(GgmlType, usize, &[u8], usize, &[u8], &mut [f32])) {
    let mut rng = Rng::new(7);
    for ty in WEIGHT_TYPES {
        for n in lengths(ty) {
            for rows in [1, 3, 4, 5, 9] {
                let w = random_rows(&mut rng, ty, n, rows);
                let (_, a) = random_act(&mut rng, ty, n);
                let rb = row_bytes(ty, n);
                let mut got = vec![0f32; rows];
                dot(ty, n, &w, rb, &a, &mut got);
                for (r, g) in got.iter().enumerate() {
                    let wr = &w[r * rb..(r + 1) * rb];
                    let want = quant::vec_dot(ty, n, wr, &a);
                    let (exact, scale) = exact_dot(ty, n, wr, &a);
                    assert!(
                        close(*g, want, scale),
                        "{isa} {ty} n={n} rows={rows} row {r}: {g} vs scalar {want}"
                    );
                    assert!(
                        close(*g, exact, scale),
                        "{isa} {ty} n={n} rows={rows} row {r}: {g} vs exact {exact}"
                    );
                }
            }
        }
    }
}

/// The dot product of the dequantized rows in f64, and Σ|w_i·a_i| (the size of the rounding
/// differences to expect).
fn exact_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> (f32, f32) {
    let dequant = |ty: GgmlType, b: &[u8]| {
        let mut v = vec![0f32; n];
        quant::dequantize_row(ty, b, &mut v).unwrap();
        v
    };
    let (wf, af) = (dequant(ty, w), dequant(vec_dot_type(ty), a));
    assert_eq!((wf.len(), af.len()), (n, n));
    let dot: f64 = wf
        .iter()
        .zip(&af)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let mag: f64 = wf
        .iter()
        .zip(&af)
        .map(|(x, y)| (f64::from(*x) * f64::from(*y)).abs())
        .sum();
    (dot as f32, mag as f32)
}

#[test]
fn scalar_tier_is_the_reference() {
    check_tier(Isa::Scalar, |ty, n, w, ws, a, out| {
        dot_rows(Isa::Scalar, ty, n, w, ws, a, out)
    });
}

#[test]
fn every_supported_tier_matches_the_reference() {
    for isa in Isa::supported() {
        check_tier(isa, |ty, n, w, ws, a, out| dot_rows(isa, ty, n, w, ws, a, out));
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_without_bf16_instructions_matches_the_reference() {
    if Isa::Avx512.is_supported() {
        check_tier(Isa::Avx512, |ty, n, w, ws, a, out| {
            // SAFETY: the tier is supported and `check_tier` passes whole rows.
            unsafe { x86::dot_rows_avx512(ty, n, w.as_ptr(), ws, a.as_ptr(), out) }
        });
    }
}

#[test]
fn activation_quantization_is_the_reference_on_every_tier() {
    let mut rng = Rng::new(11);
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q8_K,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::F32,
    ] {
        for blocks in [1, 2, 5] {
            let n = blocks * if ty == GgmlType::Q8_K { 256 } else { 32 };
            let mut inputs: Vec<Vec<f32>> = vec![
                (0..n).map(|_| rng.f32() * 10.0).collect(),
                vec![0.0; n],
                // Ties: values that land exactly on .5 after scaling, and repeated maxima of
                // both signs (Q8_K keeps the first one).
                (0..n)
                    .map(|i| [-2.5f32, 2.5, 127.0, -127.0, 0.5, -0.5, 63.5][i % 7])
                    .collect(),
                (0..n)
                    .map(|i| {
                        if i % 37 == 3 {
                            -4.0
                        } else if i % 41 == 5 {
                            4.0
                        } else {
                            rng.f32()
                        }
                    })
                    .collect(),
            ];
            inputs.push((0..n).map(|i| (i as f32 - n as f32 / 2.0) * 1e-3).collect());
            for x in &inputs {
                let mut want = vec![0u8; row_bytes(ty, n)];
                quant::quantize_activations(ty, x, &mut want).unwrap();
                for isa in Isa::supported() {
                    let mut got = vec![0u8; want.len()];
                    quantize_act(isa, ty, x, &mut got);
                    assert_eq!(got, want, "{isa} {ty} n={n}");
                }
            }
        }
    }
}

#[test]
fn q8_0_rounds_half_to_even_like_llama_cpp_simd() {
    // amax 127 gives 127/amax = 1, so x*id are the inputs themselves.
    let mut x = vec![0f32; 32];
    x[0] = 127.0;
    x[1] = 0.5;
    x[2] = -0.5;
    x[3] = 1.5;
    x[4] = 2.5;
    x[5] = -2.5;
    for isa in Isa::supported() {
        let mut q = vec![0u8; 34];
        quantize_act(isa, GgmlType::Q8_0, &x, &mut q);
        let mut want = vec![0u8; 34];
        quant::quantize_activations(GgmlType::Q8_0, &x, &mut want).unwrap();
        assert_eq!(q, want, "{isa}");
        let v: Vec<i8> = q[2..8].iter().map(|&b| b as i8).collect();
        assert_eq!(v, [127, 0, 0, 2, 2, -2], "{isa}");
    }
}

#[test]
fn isa_names_round_trip() {
    for isa in Isa::ALL {
        assert_eq!(Isa::from_name(isa.name()), Some(isa));
    }
    assert!(Isa::supported().contains(&Isa::Scalar));
    assert!(Isa::active().is_supported());
}

/// The side data's sub-block sums (taken from Q8_K's stored 16-value sums) are the sums of the
/// quantized activations, for every sub-block size and offset, and every token's are in its place
/// (71 tokens: chunks of 32 over two threads and a partial one).
#[test]
fn activation_side_sums_are_the_quant_sums() {
    let mut rng = Rng::new(41);
    for (ty, off) in [
        (GgmlType::Q6_K, 32),
        (GgmlType::Q4_K, 0),
        (GgmlType::Q3_K, 0),
        (GgmlType::Q2_K, 0),
        (GgmlType::Q4_0, 8),
        (GgmlType::Q4_1, 0),
        (GgmlType::Q8_0, 0),
    ] {
        let at = vec_dot_type(ty);
        let n = 512;
        let n_tokens = 71;
        let arb = row_bytes(at, n);
        let xq: Vec<u8> = (0..n_tokens)
            .flat_map(|_| random_act(&mut rng, ty, n).1)
            .collect();
        let pool = crate::threads::ThreadPool::new(2).unwrap();
        let side = gemm::act_side(&pool, ty, at, n, &xq, arb, n_tokens, off);
        let sub = n / side.n_sub;
        for t in 0..n_tokens {
            let row = &xq[t * arb..(t + 1) * arb];
            for j in 0..side.n_sub {
                let q0 = side.qoff[j] as usize;
                let sum: i32 = row[q0..q0 + sub].iter().map(|&b| i32::from(b as i8)).sum();
                assert_eq!(
                    side.osum[t * side.n_sub + j],
                    -off * sum,
                    "{ty} token {t} sub-block {j}"
                );
                // The block's scale (and Q8_1's stored `d · Σa`) as the act type lays it out.
                let le16 = |o: usize| f16::from_le_bytes([row[o], row[o + 1]]).to_f32();
                let (d, m) = match at {
                    GgmlType::Q8_K => {
                        let o = j * sub / 256 * 292;
                        let d = f32::from_le_bytes([row[o], row[o + 1], row[o + 2], row[o + 3]]);
                        (d, -(d * sum as f32))
                    }
                    GgmlType::Q8_1 => (le16(j * 36), le16(j * 36 + 2)),
                    _ => (le16(j * 34), 0.0),
                };
                assert_eq!(side.d[t * side.n_sub + j], d, "{ty} token {t} sub-block {j}");
                if !side.msum.is_empty() {
                    assert_eq!(side.msum[t * side.n_sub + j], m, "{ty} token {t} sub-block {j}");
                }
                if !side.sum.is_empty() {
                    assert_eq!(side.sum[t * side.n_sub + j], sum, "{ty} token {t} sub-block {j}");
                }
            }
        }
    }
}

/// Transposes match the definition on every tier, for sizes with and without whole 16 x 16 blocks.
#[test]
fn transposes_match_the_definition() {
    let mut rng = Rng::new(37);
    for (rows, cols) in [
        (1, 1),
        (3, 5),
        (16, 16),
        (16, 40),
        (17, 33),
        (48, 64),
        (64, 80),
        (80, 48),
    ] {
        let src: Vec<f32> = (0..rows * cols).map(|_| rng.f32() * 2.0 - 1.0).collect();
        for isa in Isa::supported() {
            let mut dst = vec![f32::NAN; rows * cols];
            attn::transpose(isa, &src, rows, cols, &mut dst);
            for (r, c) in (0..rows).flat_map(|r| (0..cols).map(move |c| (r, c))) {
                assert_eq!(
                    dst[c * rows + r].to_bits(),
                    src[r * cols + c].to_bits(),
                    "{isa} {rows} x {cols}: ({r}, {c})"
                );
            }
        }
    }
}

/// The attention kernels' lane-wise steps and the f16 row conversion, every tier against the
/// scalar code, bit for bit: with 8 query lanes (which AVX-512 runs two cells to a vector or on
/// 8-lane vectors), 16 and 48, cell counts around the 8- and 4-cell score tiles and the 16- and
/// 32-cell groups, odd ones, rows of odd lengths; weights with and without the f16 rounding; the
/// weighted sums of value rows with zero (skipped) and NaN weights.
#[test]
fn attention_kernels_match_the_scalar_code_bitwise() {
    let mut rng = Rng::new(31);
    for n in [1, 7, 8, 15, 16, 17, 40, 64, 255, 256, 259] {
        let src: Vec<u8> = (0..n)
            .flat_map(|_| f16::from_f32(rng.f32() * 8.0).to_bits().to_le_bytes())
            .collect();
        let mut want = vec![0f32; n];
        attn::f16_row(Isa::Scalar, &src, &mut want);
        for isa in Isa::supported() {
            let mut got = vec![f32::NAN; n];
            attn::f16_row(isa, &src, &mut got);
            assert!(
                got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa} f16 row of {n}"
            );
        }
    }
    // Key rows converted and paired in one pass: the same as converting, then pairing.
    for (dk, rows) in [(16, 2), (64, 32), (80, 6), (40, 4), (256, 2)] {
        let src: Vec<u8> = (0..dk * rows)
            .flat_map(|_| f16::from_f32(rng.f32() * 8.0 - 4.0).to_bits().to_le_bytes())
            .collect();
        let mut f = vec![0f32; dk * rows];
        attn::f16_row(Isa::Scalar, &src, &mut f);
        let mut want = vec![0f32; dk * rows];
        attn::pair_rows(&f, dk, &mut want);
        for isa in Isa::supported() {
            let mut got = vec![f32::NAN; dk * rows];
            attn::f16_key_pairs(isa, &src, dk, &mut got);
            assert!(
                got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa} f16 key pairs: dk {dk} rows {rows}"
            );
        }
    }
    for blocks in [1, 2, 5] {
        // Random scales (finite f16, some tiny) and every quant value.
        let src: Vec<u8> = (0..blocks)
            .flat_map(|_| {
                let d = f16::from_f32((rng.f32() - 0.5) * 0.1).to_bits().to_le_bytes();
                let q: Vec<u8> = (0..32).map(|_| (rng.f32() * 256.0) as u8).collect();
                d.into_iter().chain(q)
            })
            .collect();
        let mut want = vec![0f32; 32 * blocks];
        crate::quant::dequantize_row(GgmlType::Q8_0, &src, &mut want).unwrap();
        for isa in Isa::supported() {
            let mut got = vec![f32::NAN; 32 * blocks];
            attn::q8_0_row(isa, &src, &mut got);
            assert!(
                got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa} q8_0 row of {blocks} blocks"
            );
        }
    }
    for nq in [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 40] {
        let nqp = attn::padded_queries(nq);
        assert!(nqp >= nq && nqp.is_multiple_of(8));
        // Cells past whole groups of 16 and 32 (AVX-512's cells in lanes for a few queries, and
        // its cell pairs for up to 8).
        for (dk, nc) in [(64, 1), (40, 7), (64, 8), (80, 13), (256, 21), (64, 64), (32, 51)] {
            // Padding queries are zero, as the attention step makes them.
            let qt: Vec<f32> = (0..dk * nqp)
                .map(|x| if x % nqp < nq { rng.f32() * 2.0 - 1.0 } else { 0.0 })
                .collect();
            let k: Vec<f32> = (0..nc * dk).map(|_| rng.f32()).collect();
            // The same keys with their whole groups of 16 cells paired, as the tiers that take
            // them so get them from an F16 cache.
            let mut kp = k.clone();
            let np = attn::paired_cells(nc) * dk;
            attn::pair_rows(&k[..np], dk, &mut kp[..np]);
            // The same keys rounded to f16, taken as f16 rows where the tier can: the scores of
            // the converted rows.
            let (k16, k16f) = rounded_to_f16(&k);
            let mut want16 = vec![f32::NAN; nc * nqp];
            attn::scores(Isa::Scalar, &qt, nqp, nq, &k16f, dk, nc, false, &mut want16);
            for isa in Isa::supported()
                .into_iter()
                .filter(|&isa| attn::keys_from_f16(isa, nq, dk))
            {
                let mut got = vec![f32::NAN; nc * nqp];
                let done = attn::scores_f16(isa, &qt, nqp, nq, &k16, dk, nc, 64 * dk * 2, &mut got);
                assert_eq!(done, nc / 16 * 16, "{isa} f16 keys: whole groups of 16");
                assert!(
                    got[..done * nqp]
                        .iter()
                        .zip(&want16)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{isa} scores from f16 keys: nq {nq} dk {dk} cells {nc}"
                );
            }
            let run = |isa: Isa| {
                let mut s = vec![f32::NAN; nc * nqp];
                attn::scores(isa, &qt, nqp, nq, &k, dk, nc, false, &mut s);
                if attn::pairs_layout(isa, nq, nqp, dk) {
                    let mut sp = vec![f32::NAN; nc * nqp];
                    attn::scores(isa, &qt, nqp, nq, &kp, dk, nc, true, &mut sp);
                    assert!(
                        sp.iter().zip(&s).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{isa} scores from paired keys: nq {nq} dk {dk} cells {nc}"
                    );
                }
                // Scaled, from the second value on (an odd count, off the vectors' alignment).
                let mut scaled = s.clone();
                attn::scale(isa, &mut scaled[1..], 0.137);
                let (mut m, mut l) = (vec![f32::NEG_INFINITY; nqp], vec![0.5f32; nqp]);
                attn::block_max(isa, &s, nqp, nc, &mut m);
                let mut w = s.clone();
                attn::weights(isa, &mut w, nqp, nc, &m, &mut l, true);
                // And without the f16 rounding (a cache of another type), from these sums on.
                let mut w32 = s.clone();
                attn::weights(isa, &mut w32, nqp, nc, &m, &mut l, false);
                [s, m, l, w, w32, scaled]
            };
            let want = run(Isa::Scalar);
            for isa in Isa::supported() {
                for (what, (got, want)) in ["scores", "max", "sums", "weights", "f32 weights", "scaled"]
                    .iter()
                    .zip(run(isa).iter().zip(&want))
                {
                    assert!(
                        got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{isa} {what}: nq {nq} dk {dk} cells {nc}"
                    );
                }
            }
        }
        // Weighted values: zero weights are skipped (a masked cell, an underflow), for some
        // queries of a cell or all; NaN weights are not. Also blocks with no zero weight at all
        // (`dense`), which the AVX-512 tier takes without masks.
        for ((dvp, nc), dense) in [(16, 1), (64, 9), (80, 70), (256, 13)]
            .into_iter()
            .flat_map(|size| [(size, false), (size, true)])
        {
            let p: Vec<f32> = (0..nc * nqp)
                .map(|i| match (i / nqp % 5, rng.f32()) {
                    (_, x) if dense => x.abs() + 0.5,
                    (0, _) => 0.0,
                    (_, x) if x < 0.3 => 0.0,
                    (_, x) if x < 0.31 => f32::NAN,
                    (_, x) => x,
                })
                .collect();
            let v: Vec<f32> = (0..nc * dvp).map(|_| rng.f32() * 4.0 - 2.0).collect();
            let start: Vec<f32> = (0..nq * dvp)
                .map(|i| if i % 3 == 0 { -0.0 } else { rng.f32() })
                .collect();
            // Query i's values, whatever the tier's layout (padding queries start at zero).
            let run = |isa: Isa| {
                let layout = attn::AccLayout::new(isa, nqp, dvp);
                let mut acc = vec![0f32; layout.size()];
                for (i, e) in (0..nq).flat_map(|i| (0..dvp).map(move |e| (i, e))) {
                    acc[layout.at(i, e)] = start[i * dvp + e];
                }
                attn::weighted_values(isa, &p, nqp, nq, &v, dvp, nc, &mut acc);
                (0..nq * dvp)
                    .map(|x| acc[layout.at(x / dvp, x % dvp)])
                    .collect::<Vec<f32>>()
            };
            let want = run(Isa::Scalar);
            for isa in Isa::supported() {
                assert!(
                    run(isa)
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{isa} weighted values: nq {nq} dvp {dvp} cells {nc} dense {dense}"
                );
            }
            // Value rows in f16, converted as they are loaded: the sums of converting them first.
            let (v16, vf) = rounded_to_f16(&v);
            for isa in Isa::supported() {
                if !attn::values_from_f16(isa, nqp, dvp) {
                    continue;
                }
                let layout = attn::AccLayout::new(isa, nqp, dvp);
                let mut want = vec![0f32; layout.size()];
                for (i, e) in (0..nq).flat_map(|i| (0..dvp).map(move |e| (i, e))) {
                    want[layout.at(i, e)] = start[i * dvp + e];
                }
                let mut got = want.clone();
                attn::weighted_values(isa, &p, nqp, nq, &vf, dvp, nc, &mut want);
                attn::weighted_values_f16(isa, &p, nqp, nq, &v16, (dvp, dvp), nc, &mut got);
                assert!(
                    got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{isa} weighted f16 values: nq {nq} dvp {dvp} cells {nc} dense {dense}"
                );
                // Values 16.. of each row only (rows `dvp` apart), as a split decode step takes
                // them: the sums of those values converted first.
                if dvp >= 32 && nc > 0 {
                    let w = dvp - 16;
                    let sub: Vec<f32> = vf.chunks_exact(dvp).flat_map(|r| &r[16..]).copied().collect();
                    let mut want = vec![0f32; nqp * w];
                    let mut got = want.clone();
                    attn::weighted_values(isa, &p, nqp, nq, &sub, w, nc, &mut want);
                    attn::weighted_values_f16(isa, &p, nqp, nq, &v16[32..], (dvp, w), nc, &mut got);
                    assert!(
                        got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{isa} weighted f16 sub-rows: nq {nq} dvp {dvp} cells {nc} dense {dense}"
                    );
                }
            }
        }
    }
}
