//! Properties of the formats on random data: round trips within each format's error, the reference
//! dot products against dequantize-then-dot, and the edge cases (zero, constant, spiky blocks).

use super::*;

/// A small deterministic generator (SplitMix64) so the tests need no extra crates.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal (Box-Muller).
    pub(crate) fn normal(&mut self) -> f32 {
        let u1 = self.uniform().max(1e-7);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }

    pub(crate) fn normals(&mut self, n: usize, std: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * std).collect()
    }
}

const WEIGHT_TYPES: [GgmlType; 15] = {
    use GgmlType::*;
    [
        F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
    ]
};

fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; ty.row_bytes(x.len() as u64).unwrap() as usize];
    quantize_row(ty, x, &mut q).unwrap();
    q
}

fn dequantize(ty: GgmlType, q: &[u8], n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    dequantize_row(ty, q, &mut y).unwrap();
    y
}

/// Relative RMS error of a round trip through each format on N(0, 1) data: about 1.25 times what
/// the reference quantizers achieve on it (Q8_0 0.53%, Q6_K 1.8%, Q4_K 7.1%, Q2_K 29%).
fn rms_bound(ty: GgmlType) -> f64 {
    use GgmlType::*;
    match ty {
        F32 => 0.0,
        F16 => 3e-4,
        BF16 => 2.5e-3,
        Q8_0 | Q8_1 => 7e-3,
        Q8_K => 9e-3,
        Q6_K => 2.3e-2,
        Q5_0 | Q5_1 | Q5_K => 5.5e-2,
        Q4_0 | Q4_1 | Q4_K | IQ4_NL | IQ4_XS => 0.11,
        Q3_K => 0.19,
        Q2_K => 0.37,
        _ => unreachable!(),
    }
}

fn rel_rms(x: &[f32], y: &[f32]) -> f64 {
    let err: f64 = x.iter().zip(y).map(|(&a, &b)| f64::from(a - b).powi(2)).sum();
    let norm: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
    (err / norm).sqrt()
}

#[test]
fn round_trips_stay_within_format_error() {
    let mut rng = Rng::new(1);
    let x = rng.normals(256 * 33, 1.0);
    for ty in WEIGHT_TYPES.into_iter().chain([GgmlType::Q8_1, GgmlType::Q8_K]) {
        let y = dequantize(ty, &quantize(ty, &x), x.len());
        let e = rel_rms(&x, &y);
        assert!(
            e <= rms_bound(ty),
            "{ty}: relative RMS error {e:.5} > {}",
            rms_bound(ty)
        );
        // Not suspiciously good either: a quantizer that stores floats would pass the bound.
        if ty.is_quantized() {
            assert!(e > rms_bound(ty) / 20.0, "{ty}: error {e} implausibly small");
        }
    }
}

#[test]
fn special_blocks_round_trip() {
    let mut rng = Rng::new(7);
    let mut blocks: Vec<Vec<f32>> = vec![
        vec![0.0; 256],
        vec![0.25; 256],
        vec![-3.0; 256],
        (0..256).map(|i| i as f32 - 128.0).collect(),
    ];
    // One spike among tiny values, and a block whose halves differ by orders of magnitude.
    let mut spike = rng.normals(256, 1e-3);
    spike[77] = 40.0;
    blocks.push(spike);
    let mut halves = rng.normals(256, 1e-4);
    for v in &mut halves[128..] {
        *v *= 1e4;
    }
    blocks.push(halves);
    for ty in WEIGHT_TYPES {
        for (i, x) in blocks.iter().enumerate() {
            let y = dequantize(ty, &quantize(ty, x), x.len());
            assert!(
                y.iter().all(|v| v.is_finite()),
                "{ty} block {i}: non-finite output"
            );
            let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
            if amax == 0.0 {
                assert!(y.iter().all(|&v| v == 0.0), "{ty}: zero block must stay zero");
                continue;
            }
            // Every element within a fraction of the block's largest magnitude.
            let frac = match ty {
                GgmlType::Q2_K => 0.6,
                GgmlType::Q3_K => 0.35,
                _ => 0.2,
            };
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() <= frac * amax, "{ty} block {i}: {a} became {b}");
            }
        }
    }
}

#[test]
fn q8_k_block_sums_match_quants() {
    let mut rng = Rng::new(3);
    let x = rng.normals(512, 2.0);
    let q = quantize(GgmlType::Q8_K, &x);
    for b in cast::<BlockQ8_K>(&q) {
        for i in 0..16 {
            let s: i32 = b.qs[16 * i..16 * i + 16].iter().map(|&v| i32::from(v)).sum();
            assert_eq!(i32::from(b.bsum(i)), s);
        }
        // The element of largest magnitude maps to -127 exactly (d carries its sign).
        assert!(b.qs.contains(&-127));
    }
}

/// Dequantize both rows and take the f64 dot product.
fn dot_reference(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> (f64, f64) {
    let wf = dequantize(ty, w, n);
    let af = dequantize(vec_dot_type(ty), a, n);
    let dot = wf
        .iter()
        .zip(&af)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let mag = wf
        .iter()
        .zip(&af)
        .map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs())
        .sum();
    (dot, mag)
}

/// Slack for Q4_1/Q5_1: llama.cpp applies the weight minimum through the activations' `s`, which
/// is d·Σq rounded to f16, so the block term m·s differs from Σ m·d·q by up to |m·s|·2^-11.
fn min_term_slack(ty: GgmlType, w: &[u8], a: &[u8]) -> f64 {
    let s = |a: &BlockQ8_1| f64::from(a.s()).abs();
    match ty {
        GgmlType::Q4_1 => cast::<BlockQ4_1>(w)
            .iter()
            .zip(cast::<BlockQ8_1>(a))
            .map(|(w, a)| f64::from(w.m()).abs() * s(a) / 1024.0)
            .sum(),
        GgmlType::Q5_1 => cast::<BlockQ5_1>(w)
            .iter()
            .zip(cast::<BlockQ8_1>(a))
            .map(|(w, a)| f64::from(w.m()).abs() * s(a) / 1024.0)
            .sum(),
        _ => 0.0,
    }
}

#[test]
fn vec_dot_equals_dequantize_then_dot() {
    let mut rng = Rng::new(11);
    for ty in WEIGHT_TYPES {
        let bs = ty.block_size().max(32) as usize;
        // Several rows, an odd count, rows of many blocks (and of a single block).
        for blocks_per_row in [1usize, 9, 37] {
            let n = bs * blocks_per_row;
            let rows = 7;
            let w = quantize(ty, &rng.normals(n * rows, 0.05));
            // Activations with an offset so the mins of Q4_1/Q5_1/K-quants matter.
            let x: Vec<f32> = rng.normals(n, 1.0).into_iter().map(|v| v + 0.3).collect();
            let mut a = vec![0u8; vec_dot_type(ty).row_bytes(n as u64).unwrap() as usize];
            quantize_activations(vec_dot_type(ty), &x, &mut a).unwrap();
            let row_bytes = w.len() / rows;
            for r in 0..rows {
                let wr = &w[r * row_bytes..(r + 1) * row_bytes];
                let got = f64::from(vec_dot(ty, n, wr, &a));
                let (want, mag) = dot_reference(ty, n, wr, &a);
                let tol = 2e-6 * mag + min_term_slack(ty, wr, &a) + 1e-9;
                assert!(
                    (got - want).abs() <= tol,
                    "{ty} n={n} row {r}: vec_dot {got} vs dequantized dot {want} (tol {tol})"
                );
            }
        }
    }
}

#[test]
fn vec_dot_types_follow_llama_cpp() {
    use GgmlType::*;
    for (w, a) in [
        (F32, F32),
        (F16, F16),
        (BF16, BF16),
        (Q4_0, Q8_0),
        (Q5_0, Q8_0),
        (Q8_0, Q8_0),
        (IQ4_NL, Q8_0),
        (Q4_1, Q8_1),
        (Q5_1, Q8_1),
        (Q2_K, Q8_K),
        (Q3_K, Q8_K),
        (Q4_K, Q8_K),
        (Q5_K, Q8_K),
        (Q6_K, Q8_K),
        (IQ4_XS, Q8_K),
    ] {
        assert_eq!(vec_dot_type(w), a, "{w}");
        assert!(can_vec_dot(w));
        assert!(can_quantize(a) && can_dequantize(a));
    }
}

#[test]
fn activation_quantizer_rounds_like_llama_cpp_simd() {
    // 0.5 exactly between quants: the reference rounds away from zero, the SIMD path to even.
    let mut x = vec![0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -0.5;
    let mut reference = vec![0u8; 34];
    let mut simd = vec![0u8; 34];
    quantize_row(GgmlType::Q8_0, &x, &mut reference).unwrap();
    quantize_activations(GgmlType::Q8_0, &x, &mut simd).unwrap();
    let (r, s) = (cast::<BlockQ8_0>(&reference)[0], cast::<BlockQ8_0>(&simd)[0]);
    assert_eq!((r.qs[0], r.qs[1], r.qs[2]), (127, 3, -1));
    assert_eq!((s.qs[0], s.qs[1], s.qs[2]), (127, 2, 0));
}

#[test]
fn errors_are_clean() {
    let mut y = vec![0f32; 32];
    let e = dequantize_row(GgmlType::IQ2_XS, &[0; 74], &mut y).unwrap_err();
    assert!(matches!(e, Error::UnsupportedType { .. }), "{e}");
    let e = e.for_tensor("blk.0.attn_q.weight");
    assert_eq!(
        e.to_string(),
        "tensor 'blk.0.attn_q.weight' has type iq2_xs, which ollamars does not support"
    );
    assert!(dequantize_row(GgmlType::Q4_0, &[0; 17], &mut y).is_err());
    assert!(dequantize_row(GgmlType::Q4_K, &[0; 144], &mut y).is_err());
    let mut q = vec![0u8; 18];
    assert!(quantize_row(GgmlType::Q4_0, &[0.0; 31], &mut q).is_err());
    assert!(quantize_row(GgmlType::TQ2_0, &[0.0; 256], &mut [0; 66]).is_err());
}

#[test]
#[should_panic(expected = "activation row")]
fn vec_dot_rejects_wrong_activation_length() {
    vec_dot(GgmlType::Q4_0, 32, &[0; 18], &[0; 18]);
}

#[test]
fn validation_catches_overflowing_scales() {
    let big = vec![1e9f32; 256];
    for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16] {
        let q = quantize(ty, &big);
        assert!(!validate_row_data(ty, &q), "{ty}: 1e9 fits?");
        let fine = quantize(ty, &vec![0.5f32; 256]);
        assert!(validate_row_data(ty, &fine), "{ty}");
    }
    assert!(validate_row_data(GgmlType::F32, &f32::MAX.to_le_bytes()));
    assert!(!validate_row_data(GgmlType::F32, &f32::NAN.to_le_bytes()));
    assert!(!validate_row_data(GgmlType::Q4_0, &[0u8; 17]));
}
