//! `ollamars quantize`, run as the built binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use engine::gguf::Gguf;
use engine::quant::GgmlType;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures")
        .join(name)
}

fn quantize(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ollamars"));
    cmd.arg("quantize");
    for a in args {
        cmd.arg(a);
    }
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Files in `dir` (to see that nothing, not even a temporary file, was left behind).
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn quantizes_like_llama_quantize() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q4_K_M.gguf");
    let run = quantize(&[
        &fixture("quant/src-f32.gguf"),
        &out,
        &"Q4_K_M",
        &"--threads",
        &"2",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(fixture("quant/q4_K_M.gguf")).unwrap(),
        "output differs from llama-quantize's"
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("Q4_K_M (Q4_K - Medium)"), "{stdout}");
    assert!(stdout.contains("21 tensors"), "{stdout}");
    // Not a terminal: one progress line per tensor on stderr.
    let err = stderr(&run);
    assert!(err.contains("[21/21] 100.0% blk.1.ffn_up.weight"), "{err}");
    assert!(
        err.contains("blk.1.ffn_down.weight") && err.contains("f32 -> q6_K"),
        "{err}"
    );
    assert!(
        err.contains("output_norm.weight") && err.contains("f32 (kept)"),
        "{err}"
    );
    assert_eq!(listing(dir.path()), ["q4_K_M.gguf"]);
}

#[test]
fn refuses_to_write_over_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("model.gguf");
    std::fs::copy(fixture("quant/src-f32.gguf"), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let hard = dir.path().join("hard.gguf");
    std::fs::hard_link(&input, &hard).unwrap();
    let mut outputs = vec![input.clone(), hard, dir.path().join("sub/../model.gguf")];
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    #[cfg(unix)]
    {
        let link = dir.path().join("link.gguf");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        outputs.push(link);
    }
    let files = listing(dir.path());
    for out in outputs {
        let run = quantize(&[&input, &out, &"q8_0"]);
        assert!(!run.status.success(), "{} accepted", out.display());
        assert!(stderr(&run).contains("is the input file"), "{}", stderr(&run));
        assert_eq!(std::fs::read(&input).unwrap(), before, "input changed");
        assert_eq!(listing(dir.path()), files, "files left behind");
    }
}

#[test]
fn clear_errors_for_bad_requests() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let run = quantize(&[&fixture("quant/src-f32.gguf"), &out, &"q9_X"]);
    assert!(!run.status.success());
    assert!(
        stderr(&run).contains("unknown or unsupported quantization type 'q9_X'"),
        "{}",
        stderr(&run)
    );
    // A mix that needs an importance matrix.
    let run = quantize(&[&fixture("quant/src-f32.gguf"), &out, &"iq2_xxs"]);
    assert!(!run.status.success());
    let run = quantize(&[&dir.path().join("missing.gguf"), &out, &"q8_0"]);
    assert!(!run.status.success());
    assert!(stderr(&run).contains("missing.gguf"), "{}", stderr(&run));
    // Not a GGUF file.
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"definitely not a model").unwrap();
    let run = quantize(&[&junk, &out, &"q8_0"]);
    assert!(!run.status.success());
    assert!(!out.exists());
    assert_eq!(listing(dir.path()), ["junk.gguf"]);
    // A directory as the output: said before any tensor is converted, nothing written.
    let run = quantize(&[&fixture("quant/src-f32.gguf"), &dir.path(), &"q8_0"]);
    assert!(!run.status.success());
    let err = stderr(&run);
    assert!(err.contains("is a directory; name the file to write"), "{err}");
    assert!(!err.contains("[1/"), "converted tensors first: {err}");
    assert_eq!(listing(dir.path()), ["junk.gguf"]);
}

#[test]
fn requantizing_needs_to_be_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q8_0.gguf");
    let src = fixture("quant/q4_0.gguf");
    let run = quantize(&[&src, &out, &"q8_0"]);
    assert!(!run.status.success());
    assert!(stderr(&run).contains("--allow-requantize"), "{}", stderr(&run));
    assert!(!out.exists());
    let run = quantize(&[&src, &out, &"q8_0", &"--allow-requantize"]);
    assert!(run.status.success(), "{}", stderr(&run));
    let g = Gguf::open(&out).unwrap();
    for t in g.tensors() {
        let want = if t.info.dims.len() == 1 {
            GgmlType::F32
        } else {
            GgmlType::Q8_0
        };
        assert_eq!(t.info.ty, want, "{}", t.info.name);
    }
    assert_eq!(g.metadata().get_u32("general.file_type").unwrap(), Some(7));
}
