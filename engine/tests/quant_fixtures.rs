//! The quant formats against llama.cpp's own output (`../shared/fixtures`, see its README):
//! our reference quantizers give llama-quantize's bytes, and dequantizing every tensor of every
//! fixture gives back its F32 source within the format's error.

use std::collections::BTreeMap;
use std::path::PathBuf;

use engine::gguf::Gguf;
use engine::quant::{dequantize_row, quantize_row, GgmlType};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures")
}

/// The 18 `quant/` fixtures, by llama-quantize's type name.
const QUANT_FIXTURES: [&str; 18] = [
    "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K_S", "q3_K_M", "q3_K_L", "q4_K_S", "q4_K_M",
    "q5_K_S", "q5_K_M", "q6_K", "iq4_nl", "iq4_xs", "f16", "bf16",
];

fn tensor_f32(g: &Gguf, name: &str) -> Vec<f32> {
    let t = g.require_tensor(name).unwrap();
    let mut out = vec![0f32; t.info.n_elements() as usize];
    dequantize_row(t.info.ty, g.tensor_data(t), &mut out).unwrap();
    out
}

fn dequantized(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    dequantize_row(ty, bytes, &mut out).unwrap();
    out
}

fn sq_err(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| f64::from(x - y).powi(2)).sum()
}

/// Types whose reference quantizer involves no scale search: every byte must match.
fn must_match_every_byte(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, F16 | BF16 | F32 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0)
}

#[derive(Default)]
struct Tally {
    blocks: usize,
    identical: usize,
}

/// Quantizes every tensor of the F32 source to the type llama.cpp chose for it and compares block
/// by block. Legacy and float types: every byte. K-quants and IQ4: at least 99% of blocks
/// identical, and no differing block reconstructs the source worse than llama.cpp's block.
#[test]
fn reference_quantizers_reproduce_llama_cpp_bytes() {
    let src = Gguf::open(fixtures().join("quant/src-f32.gguf")).unwrap();
    let mut tally: BTreeMap<GgmlType, Tally> = BTreeMap::new();
    for name in QUANT_FIXTURES {
        let fixture = Gguf::open(fixtures().join(format!("quant/{name}.gguf"))).unwrap();
        for t in fixture.tensors() {
            let ty = t.info.ty;
            if ty == GgmlType::F32 {
                continue;
            }
            let x = tensor_f32(&src, &t.info.name);
            let theirs = fixture.tensor_data(t);
            let mut ours = vec![0u8; theirs.len()];
            quantize_row(ty, &x, &mut ours).unwrap();
            let (bs, ts) = (ty.block_size() as usize, ty.type_size() as usize);
            let entry = tally.entry(ty).or_default();
            for (i, (a, b)) in ours.chunks(ts).zip(theirs.chunks(ts)).enumerate() {
                entry.blocks += 1;
                if a == b {
                    entry.identical += 1;
                    continue;
                }
                assert!(
                    !must_match_every_byte(ty),
                    "{name}: {} block {i} ({ty}) differs from llama.cpp's",
                    t.info.name
                );
                let xb = &x[i * bs..(i + 1) * bs];
                let (ea, eb) = (
                    sq_err(xb, &dequantized(ty, a, bs)),
                    sq_err(xb, &dequantized(ty, b, bs)),
                );
                assert!(
                    ea <= eb,
                    "{name}: {} block {i} ({ty}) differs and is worse: {ea} > llama.cpp's {eb}",
                    t.info.name
                );
            }
        }
    }
    for (ty, t) in &tally {
        eprintln!("{ty}: {}/{} blocks identical", t.identical, t.blocks);
        assert!(
            t.identical * 100 >= t.blocks * 99,
            "{ty}: only {}/{} blocks identical",
            t.identical,
            t.blocks
        );
    }
    // Every format the fixtures exercise was compared.
    for ty in [
        "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs",
        "f16", "bf16",
    ] {
        assert!(
            tally.contains_key(&GgmlType::from_name(ty).unwrap()),
            "no {ty} tensor compared"
        );
    }
}

/// Relative RMS error a format may show on these fixtures' Gaussian weights (about 1.5 times what
/// llama.cpp's quantizers achieve).
fn rms_bound(ty: GgmlType) -> f64 {
    use GgmlType::*;
    match ty {
        F32 => 0.0,
        F16 => 4e-4,
        BF16 => 3e-3,
        Q8_0 => 8e-3,
        Q6_K => 2.7e-2,
        Q5_0 | Q5_1 | Q5_K => 6.5e-2,
        Q4_0 | Q4_1 | Q4_K | IQ4_NL | IQ4_XS => 0.13,
        Q3_K => 0.23,
        Q2_K => 0.44,
        other => panic!("no bound for {other}"),
    }
}

fn rel_rms(x: &[f32], y: &[f32]) -> f64 {
    (sq_err(x, y) / x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>()).sqrt()
}

/// Every tensor of `file` dequantizes to the tensor of the same name in `source` within its
/// format's error (tensors the source lacks, like a dropped output.weight, are skipped).
fn check_against_source(file: &str, source: &str) -> usize {
    let g = Gguf::open(fixtures().join(file)).unwrap();
    let src = Gguf::open(fixtures().join(source)).unwrap();
    let mut checked = 0;
    for t in g.tensors() {
        let Some(s) = src.tensor(&t.info.name) else {
            continue;
        };
        assert_eq!(s.info.dims, t.info.dims, "{file}: {}", t.info.name);
        let x = tensor_f32(&src, &t.info.name);
        let y = tensor_f32(&g, &t.info.name);
        let e = rel_rms(&x, &y);
        assert!(
            e <= rms_bound(t.info.ty),
            "{file}: {} ({}) relative RMS error {e:.5} > {}",
            t.info.name,
            t.info.ty,
            rms_bound(t.info.ty)
        );
        if t.info.ty.is_quantized() {
            assert!(
                e > 0.0,
                "{file}: {} dequantizes to exactly the source",
                t.info.name
            );
        }
        checked += 1;
    }
    checked
}

#[test]
fn every_quant_fixture_dequantizes_to_its_source() {
    for name in QUANT_FIXTURES {
        let n = check_against_source(&format!("quant/{name}.gguf"), "quant/src-f32.gguf");
        assert_eq!(n, 21, "quant/{name}.gguf");
    }
}

#[test]
fn every_tiny_fixture_dequantizes_to_its_source() {
    for name in ["f16", "q8_0", "q4_0"] {
        let n = check_against_source(
            &format!("tiny/tiny-llama-spm-e64-{name}.gguf"),
            "tiny/tiny-llama-spm-e64-f32.gguf",
        );
        assert_eq!(n, 20, "{name}");
    }
    // The two e256 files hold the same weights (no F32 source): Q6_K and Q4_K_M dequantizations
    // must agree within the sum of their errors, and both have the generator's spread.
    let a = Gguf::open(fixtures().join("tiny/tiny-llama-spm-e256-tied-q6_k.gguf")).unwrap();
    let b = Gguf::open(fixtures().join("tiny/tiny-llama-spm-e256-q4_k_m.gguf")).unwrap();
    let mut checked = 0;
    for t in a.tensors() {
        let Some(tb) = b.tensor(&t.info.name) else {
            continue;
        };
        let (x, y) = (tensor_f32(&a, &t.info.name), tensor_f32(&b, &t.info.name));
        let e = rel_rms(&x, &y);
        let bound = rms_bound(t.info.ty) + rms_bound(tb.info.ty);
        assert!(
            e <= bound,
            "e256 {}: Q6_K and {} differ by {e:.4}",
            t.info.name,
            tb.info.ty
        );
        if t.info.dims.len() == 2 {
            let std = (x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len() as f64).sqrt();
            assert!((std - 0.0625).abs() < 0.005, "e256 {}: std {std}", t.info.name);
        }
        checked += 1;
    }
    assert_eq!(checked, 20);
    // The qwen2 F16 file: every weight matrix has the generator's spread, biases and norms are F32.
    let q = Gguf::open(fixtures().join("tiny/tiny-qwen2-e32-f16.gguf")).unwrap();
    for t in q.tensors() {
        let x = tensor_f32(&q, &t.info.name);
        assert!(x.iter().all(|v| v.is_finite()));
        if t.info.dims.len() == 2 {
            assert_eq!(t.info.ty, GgmlType::F16);
            let std = (x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len() as f64).sqrt();
            assert!((std - 0.177).abs() < 0.01, "qwen2 {}: std {std}", t.info.name);
        }
    }
}
