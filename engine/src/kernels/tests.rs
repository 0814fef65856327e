//! Every tier against the scalar reference, on random data with odd sizes and row counts that
//! are not a multiple of the kernels' row groups.

use half::f16;

use super::*;

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
            .flat_map(|_| scalar::f32_to_bf16(rng.f32()).to_le_bytes())
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
    quantize_act(Isa::Scalar, vec_dot_type(ty), &x, &mut q);
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

/// Every supported tier's `dot_rows` against the scalar `vec_dot`, for every weight type.
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
                    let want = scalar::vec_dot(ty, n, wr, &a);
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
    let (wf, af) = (dequant(ty, n, w), dequant(vec_dot_type(ty), n, a));
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

/// Values of a row, dequantized from the block layouts as engine.md §2 describes them (written
/// apart from the kernels, so that a layout misread in both would still be caught).
fn dequant(ty: GgmlType, n: usize, b: &[u8]) -> Vec<f32> {
    use GgmlType::*;
    let h = |b: &[u8], o: usize| f16::from_le_bytes([b[o], b[o + 1]]).to_f32();
    let bs = ty.block_size() as usize;
    let bb = ty.type_size() as usize;
    let mut y = Vec::with_capacity(n);
    match ty {
        F32 => y.extend(
            b.chunks_exact(4)
                .take(n)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        F16 => y.extend(
            b.chunks_exact(2)
                .take(n)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        BF16 => y.extend(
            b.chunks_exact(2)
                .take(n)
                .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)),
        ),
        _ => {
            for x in b.chunks_exact(bb).take(n / bs) {
                let mut v = [0f32; 256];
                match ty {
                    Q8_0 => (0..32).for_each(|j| v[j] = h(x, 0) * f32::from(x[2 + j] as i8)),
                    Q8_1 => (0..32).for_each(|j| v[j] = h(x, 0) * f32::from(x[4 + j] as i8)),
                    Q8_K => {
                        let d = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
                        (0..256).for_each(|j| v[j] = d * f32::from(x[4 + j] as i8));
                    }
                    Q4_0 | IQ4_NL => {
                        for j in 0..16 {
                            let (lo, hi) = (x[2 + j] & 15, x[2 + j] >> 4);
                            if ty == Q4_0 {
                                v[j] = (f32::from(lo) - 8.0) * h(x, 0);
                                v[j + 16] = (f32::from(hi) - 8.0) * h(x, 0);
                            } else {
                                v[j] = h(x, 0) * f32::from(blocks::IQ4NL_VALUES[lo as usize]);
                                v[j + 16] = h(x, 0) * f32::from(blocks::IQ4NL_VALUES[hi as usize]);
                            }
                        }
                    }
                    Q4_1 => {
                        for j in 0..16 {
                            v[j] = f32::from(x[4 + j] & 15) * h(x, 0) + h(x, 2);
                            v[j + 16] = f32::from(x[4 + j] >> 4) * h(x, 0) + h(x, 2);
                        }
                    }
                    Q5_0 | Q5_1 => {
                        let o = if ty == Q5_0 { 2 } else { 4 };
                        let qh = u32::from_le_bytes([x[o], x[o + 1], x[o + 2], x[o + 3]]);
                        for j in 0..16 {
                            let xh0 = ((qh >> j) << 4) & 0x10;
                            let xh1 = (qh >> (j + 12)) & 0x10;
                            let q0 = (u32::from(x[o + 4 + j] & 15) | xh0) as f32;
                            let q1 = (u32::from(x[o + 4 + j] >> 4) | xh1) as f32;
                            if ty == Q5_0 {
                                v[j] = (q0 - 16.0) * h(x, 0);
                                v[j + 16] = (q1 - 16.0) * h(x, 0);
                            } else {
                                v[j] = q0 * h(x, 0) + h(x, 2);
                                v[j + 16] = q1 * h(x, 0) + h(x, 2);
                            }
                        }
                    }
                    Q4_K | Q5_K => {
                        let (d, dmin, sc) = (h(x, 0), h(x, 2), &x[4..16]);
                        let get = |j: usize| {
                            if j < 4 {
                                (sc[j] & 63, sc[j + 4] & 63)
                            } else {
                                (
                                    (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4),
                                    (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
                                )
                            }
                        };
                        let (qh, qs) = if ty == Q5_K {
                            (&x[16..48], &x[48..176])
                        } else {
                            (&x[0..0], &x[16..144])
                        };
                        for c in 0..4 {
                            let (s1, m1) = get(2 * c);
                            let (s2, m2) = get(2 * c + 1);
                            for l in 0..32 {
                                let mut q1 = f32::from(qs[32 * c + l] & 15);
                                let mut q2 = f32::from(qs[32 * c + l] >> 4);
                                if ty == Q5_K {
                                    q1 += if qh[l] & (1 << (2 * c)) != 0 { 16.0 } else { 0.0 };
                                    q2 += if qh[l] & (2 << (2 * c)) != 0 { 16.0 } else { 0.0 };
                                }
                                v[64 * c + l] = d * f32::from(s1) * q1 - dmin * f32::from(m1);
                                v[64 * c + 32 + l] = d * f32::from(s2) * q2 - dmin * f32::from(m2);
                            }
                        }
                    }
                    Q6_K => {
                        let d = h(x, 208);
                        for hh in 0..2 {
                            let (ql, qh, sc) = (&x[64 * hh..], &x[128 + 32 * hh..], &x[192 + 8 * hh..]);
                            for l in 0..32 {
                                let is = l / 16;
                                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                                let s = |k: usize| d * f32::from(sc[is + k] as i8);
                                v[128 * hh + l] = s(0) * q1 as f32;
                                v[128 * hh + l + 32] = s(2) * q2 as f32;
                                v[128 * hh + l + 64] = s(4) * q3 as f32;
                                v[128 * hh + l + 96] = s(6) * q4 as f32;
                            }
                        }
                    }
                    Q2_K | Q3_K => {
                        let (d, qs) = if ty == Q2_K {
                            (h(x, 80), &x[16..80])
                        } else {
                            (h(x, 108), &x[32..96])
                        };
                        let mut sc3 = [0i32; 16];
                        if ty == Q3_K {
                            let b = &x[96..108];
                            for k in 0..4 {
                                sc3[k] = i32::from((b[k] & 0xF) | ((b[8 + k] & 3) << 4)) - 32;
                                sc3[4 + k] = i32::from((b[4 + k] & 0xF) | (((b[8 + k] >> 2) & 3) << 4)) - 32;
                                sc3[8 + k] = i32::from((b[k] >> 4) | (((b[8 + k] >> 4) & 3) << 4)) - 32;
                                sc3[12 + k] = i32::from((b[4 + k] >> 4) | (((b[8 + k] >> 6) & 3) << 4)) - 32;
                            }
                        }
                        let mut m = 1u8;
                        for hh in 0..2 {
                            for j in 0..4 {
                                for g in 0..2 {
                                    for l in 0..16 {
                                        let e = 128 * hh + 32 * j + 16 * g + l;
                                        let q = i32::from((qs[32 * hh + 16 * g + l] >> (2 * j)) & 3);
                                        v[e] = if ty == Q2_K {
                                            let sc = x[8 * hh + 2 * j + g];
                                            d * f32::from(sc & 0xF) * q as f32 - h(x, 82) * f32::from(sc >> 4)
                                        } else {
                                            let hbit = x[16 * g + l] & m != 0;
                                            d * sc3[8 * hh + 2 * j + g] as f32
                                                * (q - if hbit { 0 } else { 4 }) as f32
                                        };
                                    }
                                }
                                m <<= 1;
                            }
                        }
                    }
                    IQ4_XS => {
                        let d = h(x, 0);
                        let sh = u16::from_le_bytes([x[2], x[3]]);
                        for ib in 0..8 {
                            let ls = ((x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF)
                                | ((((sh >> (2 * ib)) & 3) as u8) << 4);
                            let dl = d * (f32::from(ls) - 32.0);
                            for j in 0..16 {
                                let q = x[8 + 16 * ib + j];
                                v[32 * ib + j] = dl * f32::from(blocks::IQ4NL_VALUES[usize::from(q & 0xF)]);
                                v[32 * ib + 16 + j] =
                                    dl * f32::from(blocks::IQ4NL_VALUES[usize::from(q >> 4)]);
                            }
                        }
                    }
                    _ => unreachable!(),
                }
                y.extend_from_slice(&v[..bs]);
            }
        }
    }
    y
}

#[test]
fn scalar_tier_matches_reference() {
    check_tier(Isa::Scalar, |ty, n, w, ws, a, out| {
        dot_rows(Isa::Scalar, ty, n, w, ws, a, out)
    });
}

#[test]
fn every_supported_tier_matches_scalar() {
    for isa in Isa::supported() {
        check_tier(isa, |ty, n, w, ws, a, out| dot_rows(isa, ty, n, w, ws, a, out));
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_without_bf16_instructions_matches_scalar() {
    if Isa::Avx512.is_supported() {
        check_tier(Isa::Avx512, |ty, n, w, ws, a, out| {
            // SAFETY: the tier is supported and `check_tier` passes whole rows.
            unsafe { x86::dot_rows_avx512(ty, n, w.as_ptr(), ws, a.as_ptr(), out) }
        });
    }
}

#[test]
fn activation_quantization_is_identical_across_tiers() {
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
                quantize_act(Isa::Scalar, ty, x, &mut want);
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
fn q8_0_rounds_half_away_from_zero_like_roundf() {
    // amax 127 gives d = 1, so x*id are the inputs themselves.
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
        let v: Vec<i8> = q[2..8].iter().map(|&b| b as i8).collect();
        assert_eq!(v, [127, 1, -1, 2, 3, -3], "{isa}");
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
