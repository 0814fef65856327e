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

/// Explains how two GGUF files differ (metadata, tensor list, first differing tensor data).
fn describe_difference(ours: &std::path::Path, theirs: &std::path::Path) -> String {
    let (a, b) = (Gguf::open(ours).unwrap(), Gguf::open(theirs).unwrap());
    let keys = |g: &Gguf| {
        g.metadata()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    };
    if keys(&a) != keys(&b) {
        return format!(
            "metadata differs:\n ours   {:?}\n theirs {:?}",
            keys(&a),
            keys(&b)
        );
    }
    let list = |g: &Gguf| {
        g.tensors()
            .iter()
            .map(|t| format!("{} {:?} {}", t.info.name, t.info.dims, t.info.ty))
            .collect::<Vec<_>>()
    };
    if list(&a) != list(&b) {
        return format!(
            "tensor lists differ:\n ours   {:?}\n theirs {:?}",
            list(&a),
            list(&b)
        );
    }
    for (ta, tb) in a.tensors().iter().zip(b.tensors()) {
        if a.tensor_data(ta) != b.tensor_data(tb) {
            return format!("data of {} ({}) differs", ta.info.name, ta.info.ty);
        }
    }
    "same header and tensors, different padding or layout".into()
}

/// `quantize_file` of the F32 source gives llama-quantize's file byte for byte: same metadata,
/// tensor order, per-tensor types (output/token_embd rules, more bits for some attn_v/ffn_down,
/// fallbacks) and data, for all 18 `quant/` fixtures and the three quantized e64 tiny models.
#[test]
fn quantize_file_reproduces_llama_quantize() {
    use engine::quant::{quantize_file, FileType, QuantizeOptions};
    let dir = tempfile::tempdir().unwrap();
    let mut cases: Vec<(String, String, &str)> = QUANT_FIXTURES
        .iter()
        .map(|t| ("quant/src-f32.gguf".to_string(), format!("quant/{t}.gguf"), *t))
        .collect();
    for t in ["q4_0", "q8_0", "f16"] {
        cases.push((
            "tiny/tiny-llama-spm-e64-f32.gguf".into(),
            format!("tiny/tiny-llama-spm-e64-{t}.gguf"),
            t,
        ));
    }
    for (src, want, ty) in cases {
        let out = dir.path().join(format!("{ty}.gguf"));
        let ftype = FileType::from_name(ty).unwrap();
        let mut seen = 0;
        let report = quantize_file(&fixtures().join(&src), &out, &QuantizeOptions::new(ftype), |p| {
            assert_eq!(p.index, seen);
            seen += 1;
        })
        .unwrap();
        assert_eq!(seen, report.n_tensors);
        let (ours, theirs) = (
            std::fs::read(&out).unwrap(),
            std::fs::read(fixtures().join(&want)).unwrap(),
        );
        assert!(
            ours == theirs,
            "{want}: {}",
            describe_difference(&out, &fixtures().join(&want))
        );
    }
}

/// Rows of 64 fit no 256-element super-block, so on the tiny e64 model every K-quant and IQ4_XS
/// tensor takes llama.cpp's fallback (Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
/// IQ4_XS -> IQ4_NL) and the tied token embedding the output's rule. The hashes are of the files
/// llama.cpp's quantizer (the fixtures' commit, 82bb4850) writes for each mix.
#[test]
fn quantize_file_fallbacks_match_llama_quantize() {
    use engine::quant::{quantize_file, FileType, QuantizeOptions};
    use sha2::{Digest, Sha256};
    const LLAMA_QUANTIZE_SHA256: [(&str, &str); 19] = [
        (
            "q4_0",
            "6a12727f5d78834e7476af2d82b3b62864cb32b4859916fb750777657b29c3d1",
        ),
        (
            "q4_1",
            "276df4a269edb71d78c19356d8e86fa645d181a6f891f0620664f9ebc0943da9",
        ),
        (
            "q5_0",
            "6d8dfb146da76cfeffee1d50974372cd58b22dcea9faacc44f30b770556cfc92",
        ),
        (
            "q5_1",
            "a044c68cf0b74b01604d3c39d19d225c5d1120588df843a6262fdfc3d96110fd",
        ),
        (
            "q8_0",
            "b98e6366b94f3101d37f806af20428b67b34947d6b4ce602efbd760bd408e3c8",
        ),
        (
            "q2_K",
            "f07ceb8551367292652123b80dfb3c92cac231059b64ce105d8177e220a1f511",
        ),
        (
            "q3_K_S",
            "6acabeffbfe963a9376f6506de02bcd7d72b08e806934aea547ad00c8ff096ed",
        ),
        (
            "q3_K_M",
            "042bb1c131d9c9cddf58dc9dc5ddf76fe1f5688a93f04316823570cfbb752ffe",
        ),
        (
            "q3_K_L",
            "f36ce56cd4f6eee19029d0df648072e59c763e1da5c2749a3a23af6ed223621d",
        ),
        (
            "q4_K_S",
            "4a9bcd02831e0ac755d1c5a7f2cd5b091ae73e8eda1e6c6f5889867f986d3eed",
        ),
        (
            "q4_K_M",
            "9f7d696b951f8c8df9e7d93246b949856675af85bf68cc5ffd3d9455c50275b5",
        ),
        (
            "q5_K_S",
            "618360bbca66555d0e698765668652c85d2aebd9d1c38a0be841621076e0c152",
        ),
        (
            "q5_K_M",
            "e30d60e0c51f3f6e62192131f946944406076dd8a7ff90302c852cc1bfb9ca4d",
        ),
        (
            "q6_K",
            "06d48d3f476f668e0dac18fcc49d633957ffb2c1625cee59ab8af4e96ddb4fce",
        ),
        (
            "iq4_nl",
            "591a309e0c2fed763d538cefab990953ee1e8356b98665e9df70741cfba02a4c",
        ),
        (
            "iq4_xs",
            "0f6137b5ba2a49294ac4b9a737f12d2ebf07b26eef2458f9e8fbba9c138a5b2c",
        ),
        (
            "f16",
            "dfe5cf90888a6a789b72d5c33d4813dafc5fd983d739f304d04de72ce638395a",
        ),
        (
            "bf16",
            "e5f406183ed328cda8c0ca2054b27183f0e3a6a97386abcfea0e74c8744864c5",
        ),
        (
            "f32",
            "23df598703c7516e5e722c66d826af71ea2477fb4feddd75044bff3ed5b632cc",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let src = fixtures().join("tiny/tiny-llama-spm-e64-f32.gguf");
    for (ty, want) in LLAMA_QUANTIZE_SHA256 {
        let out = dir.path().join(format!("{ty}.gguf"));
        let opts = QuantizeOptions::new(FileType::from_name(ty).unwrap());
        let report = quantize_file(&src, &out, &opts, |_| {}).unwrap();
        let got = format!("{:x}", Sha256::digest(std::fs::read(&out).unwrap()));
        assert_eq!(got, want, "{ty}: {report:?}");
    }
}

/// Non-finite or overflowing weights give an error naming the tensor, and no output file.
#[test]
fn quantize_file_rejects_unusable_values() {
    use engine::gguf::{GgufWriter, Value};
    use engine::quant::{quantize_file, FileType, QuantizeOptions};
    use std::borrow::Cow;
    let dir = tempfile::tempdir().unwrap();
    for (bad, ty, want) in [
        (f32::NAN, "q4_K_M", "element 300 is NaN"),
        (f32::INFINITY, "f16", "element 300 is inf"),
        (3e9, "q8_0", "its scales overflow"),
    ] {
        let src = dir.path().join("src.gguf");
        let mut w = GgufWriter::new();
        w.set("general.architecture", Value::String("llama".into()));
        w.set("llama.block_count", Value::U32(1));
        w.add_tensor("blk.0.attn_q.weight", GgmlType::F32, &[256, 4])
            .unwrap();
        let mut x = vec![0.25f32; 1024];
        x[300] = bad;
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.write_file(&src, |_, _| Ok(Cow::Borrowed(&bytes[..]))).unwrap();
        let out = dir.path().join("out.gguf");
        let opts = QuantizeOptions::new(FileType::from_name(ty).unwrap());
        let err = quantize_file(&src, &out, &opts, |_| {}).unwrap_err().to_string();
        assert!(
            err.contains("blk.0.attn_q.weight") && err.contains(want),
            "{ty}: {err}"
        );
        assert!(!out.exists());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["src.gguf"], "{ty}");
    }
}
