//! Split models (`model-00001-of-00003.gguf`, ...): written as llama.cpp's gguf-split writes them,
//! opened as one model, and the errors when the parts do not fit together.

use std::path::{Path, PathBuf};

use engine::gguf::{
    split_path, Gguf, GgufFile, GgufWriter, SplitBy, Value, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT,
};
use engine::Error;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/tiny")
        .join(name)
}

/// Splits a real model into parts of at most `per_part` tensors under `dir/model`.
fn split_fixture(dir: &Path, per_part: usize) -> (Gguf, Vec<PathBuf>) {
    let model = Gguf::open(fixture("tiny-llama-spm-e256-q4_k_m.gguf")).unwrap();
    let w = GgufWriter::from_model(&model).unwrap();
    let parts = w
        .write_split(dir.join("model"), SplitBy::Tensors(per_part), |i, _| {
            Ok(model.tensor_data(&model.tensors()[i]).into())
        })
        .unwrap();
    (model, parts)
}

#[test]
fn a_split_set_opens_as_one_model() {
    let dir = tempfile::tempdir().unwrap();
    let (model, parts) = split_fixture(dir.path(), 8);
    let n = model.tensors().len();
    let count = n.div_ceil(8);
    assert!(count >= 3, "{n} tensors");
    assert_eq!(parts.len(), count);
    for (i, p) in parts.iter().enumerate() {
        let want = format!("model-{:05}-of-{count:05}.gguf", i + 1);
        assert_eq!(p.file_name().unwrap().to_str().unwrap(), want);
    }

    // Each part as gguf-split writes it: split keys with llama.cpp's types; model metadata only
    // in the first.
    for (i, p) in parts.iter().enumerate() {
        let f = GgufFile::open(p).unwrap();
        let meta = &f.header().metadata;
        assert_eq!(meta.get(SPLIT_NO), Some(&Value::U16(i as u16)));
        assert_eq!(meta.get(SPLIT_COUNT), Some(&Value::U16(count as u16)));
        assert_eq!(meta.get(SPLIT_TENSORS_COUNT), Some(&Value::I32(n as i32)));
        if i == 0 {
            assert_eq!(meta.len(), model.metadata().len() + 3);
        } else {
            assert_eq!(meta.len(), 3);
        }
        assert!(f.header().tensors.len() <= 8);
    }

    let split = Gguf::open(&parts[0]).unwrap();
    assert_eq!(split.files().len(), count);
    assert_eq!(split.tensors().len(), n);
    assert_eq!(
        split.metadata().get_str("general.architecture").unwrap(),
        Some("llama")
    );
    for t in model.tensors() {
        let s = split.tensor(&t.info.name).unwrap();
        assert_eq!((s.info.ty, &s.info.dims), (t.info.ty, &t.info.dims));
        assert_eq!(split.tensor_data(s), model.tensor_data(t), "{}", t.info.name);
    }
    assert_eq!(split.n_params(), model.n_params());
    assert_eq!(split.file_type().unwrap(), model.file_type().unwrap());

    // Merged back into one file, it is the original byte for byte.
    let merged = GgufWriter::from_model(&split).unwrap();
    let mut out = Vec::new();
    merged
        .write(&mut out, |i, _| Ok(split.tensor_data(&split.tensors()[i]).into()))
        .unwrap();
    assert!(out == std::fs::read(fixture("tiny-llama-spm-e256-q4_k_m.gguf")).unwrap());
}

#[test]
fn split_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let model = Gguf::open(fixture("tiny-llama-spm-e256-q4_k_m.gguf")).unwrap();
    let w = GgufWriter::from_model(&model).unwrap();
    let max = 2 << 20;
    let parts = w
        .write_split(dir.path().join("m"), SplitBy::Bytes(max), |i, _| {
            Ok(model.tensor_data(&model.tensors()[i]).into())
        })
        .unwrap();
    assert!(parts.len() > 1);
    let split = Gguf::open(&parts[0]).unwrap();
    for f in split.files() {
        let data: u64 = f
            .header()
            .tensors
            .iter()
            .map(|t| t.size.next_multiple_of(32))
            .sum();
        // Over the limit only when one tensor alone is bigger.
        assert!(data <= max || f.header().tensors.len() == 1, "{data}");
    }
    assert_eq!(split.tensors().len(), model.tensors().len());
}

fn err_of(path: &Path) -> String {
    match Gguf::open(path) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "{msg}");
            msg
        }
    }
}

/// Rewrites one part with its metadata (or tensor list) changed by `edit`.
fn rewrite_part(path: &Path, edit: impl FnOnce(&mut GgufWriter)) {
    let f = GgufFile::open(path).unwrap();
    let mut w = GgufWriter::new();
    w.metadata = f.header().metadata.clone();
    for t in &f.header().tensors {
        w.add_tensor(t.name.clone(), t.ty, &t.dims).unwrap();
    }
    edit(&mut w);
    let tensors = f.header().tensors.clone();
    // Tensors the edit added get zeros.
    w.write_file(path, |i, t| {
        Ok(match tensors.get(i) {
            Some(info) => f.tensor_data(info).to_vec().into(),
            None => vec![0; t.size as usize].into(),
        })
    })
    .unwrap();
}

#[test]
fn a_missing_part_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (_, parts) = split_fixture(dir.path(), 8);
    std::fs::remove_file(&parts[1]).unwrap();
    let msg = err_of(&parts[0]);
    assert!(
        msg.contains(&format!("part 2 of {} is missing", parts.len())),
        "{msg}"
    );
    assert!(msg.contains(&parts[1].display().to_string()), "{msg}");
}

#[test]
fn opening_a_later_part_points_to_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let (_, parts) = split_fixture(dir.path(), 8);
    let msg = err_of(&parts[2]);
    assert!(msg.contains(&format!("is part 3 of {}", parts.len())), "{msg}");
    assert!(
        msg.contains(&format!("open its first part, {}", parts[0].display())),
        "{msg}"
    );
}

#[test]
fn a_part_with_the_wrong_number_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, parts) = split_fixture(dir.path(), 8);
    // Part 2 and part 3 swapped: each says the other's number.
    rewrite_part(&parts[1], |w| {
        w.set(SPLIT_NO, Value::U16(2));
    });
    let msg = err_of(&parts[0]);
    assert!(msg.contains("should be part 2"), "{msg}");
    assert!(msg.contains("but has split.no 2"), "{msg}");
}

#[test]
fn a_part_without_split_keys_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, parts) = split_fixture(dir.path(), 8);
    rewrite_part(&parts[2], |w| {
        w.metadata.remove(SPLIT_NO);
    });
    let msg = err_of(&parts[0]);
    assert!(msg.contains("but has no split.no key"), "{msg}");
}

#[test]
fn a_part_from_another_set_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, parts) = split_fixture(dir.path(), 8);
    rewrite_part(&parts[1], |w| {
        w.set(SPLIT_COUNT, Value::U16(7));
    });
    let msg = err_of(&parts[0]);
    assert!(
        msg.contains(&format!("is part 2 of a set of {}", parts.len())),
        "{msg}"
    );
    assert!(msg.contains("has split.count 7"), "{msg}");
}

#[test]
fn a_wrong_tensor_total_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (model, parts) = split_fixture(dir.path(), 8);
    rewrite_part(&parts[0], |w| {
        w.set(SPLIT_TENSORS_COUNT, Value::I32(5));
    });
    let msg = err_of(&parts[0]);
    assert!(
        msg.contains(&format!(
            "has 5 tensors (split.tensors.count), its {} parts hold {}",
            parts.len(),
            model.tensors().len()
        )),
        "{msg}"
    );
}

#[test]
fn a_tensor_in_two_parts_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (model, parts) = split_fixture(dir.path(), 8);
    let first = &model.tensors()[0].info;
    rewrite_part(&parts[2], |w| {
        w.add_tensor(first.name.clone(), first.ty, &first.dims).unwrap();
    });
    let msg = err_of(&parts[0]);
    assert!(
        msg.contains(&format!("tensor {:?} is in both", first.name)),
        "{msg}"
    );
}

#[test]
fn a_first_part_must_be_named_like_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_, parts) = split_fixture(dir.path(), 8);
    let renamed = dir.path().join("model.gguf");
    std::fs::rename(&parts[0], &renamed).unwrap();
    let msg = err_of(&renamed);
    assert!(msg.contains("must end in -00001-of-"), "{msg}");
}

#[test]
fn split_path_matches_llama_cpp() {
    assert_eq!(
        split_path(Path::new("/models/llama"), 0, 3),
        Path::new("/models/llama-00001-of-00003.gguf")
    );
    assert_eq!(
        split_path(Path::new("x"), 41, 120),
        Path::new("x-00042-of-00120.gguf")
    );
    let err = Error::Split("x".into());
    assert_eq!(err.to_string(), "split GGUF: x");
}
