//! The per-tensor type rules on real models (tied embeddings, rows of 640 and 896 that fall back
//! from Q4_K/Q6_K to Q5_0/Q8_0, the "more bits" attn_v and ffn_down layers).

use std::path::{Path, PathBuf};
use std::process::Command;

use engine::gguf::Gguf;
use engine::quant::mix::{self, MixParams};
use engine::quant::{FileType, GgmlType};

/// A real model: `$VAR`, else fetched (and verified) by `scripts/fetch-model.sh NAME`.
fn real_model(var: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-model.sh");
    let out = Command::new(script)
        .arg(name)
        .output()
        .expect("run scripts/fetch-model.sh");
    assert!(
        out.status.success(),
        "fetch-model.sh {name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The Q4_K_M plan of a real model as if its tensors were F32.
fn plan_from_f32(path: &Path) -> Vec<mix::TensorPlan> {
    let g = Gguf::open(path).unwrap();
    let infos: Vec<_> = g
        .tensors()
        .iter()
        .map(|t| {
            let mut t = t.info.clone();
            t.ty = GgmlType::F32;
            t
        })
        .collect();
    let params = MixParams::from_metadata(g.metadata()).unwrap();
    mix::plan(FileType::Q4_K_M, &params, &infos).unwrap()
}

/// Gemma 3 270M was quantized by a llama.cpp with today's rules: planning Q4_K_M for its tensors
/// keeps every type it has, and planning from F32 gives the same types.
fn check_plan_matches(path: PathBuf) -> Vec<GgmlType> {
    let g = Gguf::open(&path).unwrap();
    assert_eq!(
        g.metadata().get_u32("general.file_type").unwrap(),
        Some(FileType::Q4_K_M.id())
    );
    let infos: Vec<_> = g.tensors().iter().map(|t| t.info.clone()).collect();
    let params = MixParams::from_metadata(g.metadata()).unwrap();
    let plan = mix::plan(FileType::Q4_K_M, &params, &infos).unwrap();
    assert_eq!(plan.len(), infos.len());
    for p in &plan {
        // The file's tensors are already at their Q4_K_M types; the plan must keep each one.
        assert_eq!(p.to, p.from, "{}: {}", path.display(), p.name);
    }
    let from_f32 = plan_from_f32(&path);
    for (a, b) in from_f32.iter().zip(&plan) {
        assert_eq!((&a.name, a.to), (&b.name, b.from), "{}", path.display());
    }
    from_f32.iter().map(|p| p.to).collect()
}

#[test]
fn q4_k_m_plan_matches_real_gemma3() {
    let types = check_plan_matches(real_model("OLLAMARS_TEST_GEMMA", "gemma3-270m"));
    let count = |t: GgmlType| types.iter().filter(|&&x| x == t).count();
    assert_eq!(types.len(), 236);
    assert_eq!(
        count(GgmlType::Q8_0),
        10,
        "token_embd (tied) and 9 more-bits attn_v"
    );
    assert_eq!(count(GgmlType::Q6_K), 9);
}

/// The Qwen2.5-Coder file was made by an older llama.cpp, which counted attn_v/ffn_down layers in
/// string order (blk.0, blk.1, blk.10, ...), so its "more bits" layers differ from today's. The
/// reference here is llama.cpp at the fixtures' commit quantizing this model's F32 weights: the
/// SHA-256 of its output's tensor list ("name type" lines, in file order).
#[test]
fn q4_k_m_plan_matches_llama_cpp_on_qwen25() {
    use sha2::{Digest, Sha256};
    const LLAMA_CPP_TENSOR_LIST_SHA256: &str =
        "b4e1e706b2060ee863c37fb6f5bd6de203cc6f3353ac4f1777657924ff7c1023";
    let plan = plan_from_f32(&real_model("OLLAMARS_TEST_QWEN", "qwen25-coder-0.5b"));
    let list: String = plan
        .iter()
        .map(|p| format!("{} {}\n", p.name, p.to.name()))
        .collect();
    assert_eq!(
        format!("{:x}", Sha256::digest(list.as_bytes())),
        LLAMA_CPP_TENSOR_LIST_SHA256,
        "{list}"
    );
    let count = |t: GgmlType| plan.iter().filter(|p| p.to == t).count();
    assert_eq!(
        [
            count(GgmlType::Q5_0),
            count(GgmlType::F32),
            count(GgmlType::Q8_0),
            count(GgmlType::Q6_K),
            count(GgmlType::Q4_K)
        ],
        [133, 121, 13, 12, 12]
    );
}
