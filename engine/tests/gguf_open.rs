//! Opening the shared fixtures: every file parses, and a write/read round trip is exact.

use std::path::PathBuf;

use engine::gguf::{Array, Gguf, GgufWriter, Value};
use engine::quant::GgmlType;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures")
}

#[test]
fn every_fixture_opens() {
    for dir in ["tiny", "quant", "vocab"] {
        for entry in std::fs::read_dir(fixtures().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "gguf") {
                let g = Gguf::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(
                    g.metadata().get("general.architecture").is_some(),
                    "{}",
                    path.display()
                );
                for t in g.tensors() {
                    assert_eq!(g.tensor_data(t).len() as u64, t.info.size);
                }
            }
        }
    }
}

#[test]
fn write_then_read_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rt.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.set("a.u8", Value::U8(7));
    w.set("a.f64", Value::F64(-1.5));
    w.set(
        "a.nested",
        Value::Array(Array::Array(vec![
            Array::I32(vec![1, -2]),
            Array::String(Default::default()),
        ])),
    );
    w.add_tensor("t0", GgmlType::F32, &[3, 2]).unwrap();
    w.add_tensor("t1", GgmlType::Q8_0, &[32]).unwrap();
    let t0: Vec<u8> = (0..24).collect();
    let t1: Vec<u8> = (0..34).map(|i| i as u8 * 3).collect();
    w.write_file(&path, |i, _| {
        Ok(if i == 0 {
            t0.as_slice().into()
        } else {
            t1.as_slice().into()
        })
    })
    .unwrap();
    let g = Gguf::open(&path).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.metadata().get("a.u8"), Some(&Value::U8(7)));
    assert_eq!(g.metadata().get("a.nested"), w.metadata.get("a.nested"));
    assert_eq!(g.tensor_data(g.tensor("t0").unwrap()), t0.as_slice());
    assert_eq!(g.tensor_data(g.tensor("t1").unwrap()), t1.as_slice());
    assert_eq!(g.tensor("t1").unwrap().info.offset % 32, 0);
}

/// Our writer lays files out exactly as llama.cpp does: every fixture (written by llama.cpp's
/// converter and quantizer) read and written back is byte-identical.
#[test]
fn fixtures_round_trip_byte_identical() {
    for dir in ["tiny", "quant", "vocab"] {
        for entry in std::fs::read_dir(fixtures().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "gguf") {
                continue;
            }
            let g = Gguf::open(&path).unwrap();
            let w = GgufWriter::from_model(&g).unwrap();
            let mut out = Vec::new();
            w.write(&mut out, |i, _| Ok(g.tensor_data(&g.tensors()[i]).into()))
                .unwrap();
            let original = std::fs::read(&path).unwrap();
            assert_eq!(out.len(), original.len(), "{}", path.display());
            assert!(out == original, "{} differs", path.display());
        }
    }
}
