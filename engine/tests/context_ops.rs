//! The batch API and sequence operations on a tiny llama model: chunking, several sequences in
//! one batch, prefix reuse by copy, removal, context shift, embeddings.

use std::path::PathBuf;
use std::sync::Arc;

use engine::generate::{argmax, generate_greedy, GenerateParams};
use engine::quant::{quantize_file, FileType, QuantizeOptions};
use engine::{Batch, Context, ContextParams, Error, KvType, Model, ModelParams};

fn tiny(name: &str) -> Arc<Model> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/tiny")
        .join(name);
    Model::load(p, &ModelParams::default()).unwrap()
}

fn ctx(model: &Arc<Model>, n_ctx: u32, n_batch: u32, n_seq: u32) -> Context {
    Context::new(
        model.clone(),
        ContextParams {
            n_ctx,
            n_batch,
            n_seq_max: n_seq,
            n_threads: 2,
            ..Default::default()
        },
    )
    .unwrap()
}

const PROMPT: [u32; 12] = [
    1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203,
];

fn last_logits(c: &mut Context, tokens: &[u32], pos0: i32, seq: u32) -> Vec<f32> {
    c.decode(&Batch::from_tokens(tokens, pos0, seq)).unwrap();
    c.logits(tokens.len() - 1).unwrap().to_vec()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn chunked_batches_give_the_same_logits() {
    let m = tiny("tiny-llama-spm-e64-f32.gguf");
    let whole = last_logits(&mut ctx(&m, 64, 512, 1), &PROMPT, 0, 0);
    let mut c = ctx(&m, 64, 5, 1);
    let chunked = last_logits(&mut c, &PROMPT, 0, 0);
    assert!(max_diff(&whole, &chunked) < 1e-5);
    // Token by token.
    let mut c = ctx(&m, 64, 512, 1);
    for (i, &t) in PROMPT.iter().enumerate() {
        c.decode(&Batch::from_tokens(&[t], i as i32, 0)).unwrap();
    }
    assert!(max_diff(&whole, c.logits(0).unwrap()) < 1e-5);
}

#[test]
fn sequences_in_one_batch_are_independent() {
    let m = tiny("tiny-llama-spm-e64-f16.gguf");
    let other = [1u32, 3439, 17632, 1925, 29892, 920];
    let a = last_logits(&mut ctx(&m, 64, 512, 1), &PROMPT, 0, 0);
    let b = last_logits(&mut ctx(&m, 64, 512, 1), &other, 0, 0);
    let mut c = ctx(&m, 128, 512, 2);
    let mut batch = Batch::new();
    // Interleave the two sequences' tokens.
    for i in 0..PROMPT.len() {
        batch.add(PROMPT[i], i as i32, 0, i == PROMPT.len() - 1);
        if i < other.len() {
            batch.add(other[i], i as i32, 1, i == other.len() - 1);
        }
    }
    c.decode(&batch).unwrap();
    let ia = (0..batch.len()).rfind(|&i| batch.seqs()[i] == 0).unwrap();
    let ib = (0..batch.len()).rfind(|&i| batch.seqs()[i] == 1).unwrap();
    assert!(max_diff(&a, c.logits(ia).unwrap()) < 1e-5);
    assert!(max_diff(&b, c.logits(ib).unwrap()) < 1e-5);
    assert!(c.logits(0).is_none(), "logits only where asked");
}

#[test]
fn copied_prefix_is_reused_and_removal_rewinds() {
    let m = tiny("tiny-llama-spm-e64-f32.gguf");
    let full = last_logits(&mut ctx(&m, 64, 512, 1), &PROMPT, 0, 0);
    let mut c = ctx(&m, 64, 512, 2);
    last_logits(&mut c, &PROMPT[..8], 0, 0);
    c.seq_cp(0, 1, 0, -1);
    let via_copy = last_logits(&mut c, &PROMPT[8..], 8, 1);
    assert!(max_diff(&full, &via_copy) < 1e-5);
    assert_eq!(c.seq_pos_max(0), Some(7));
    assert_eq!(c.seq_pos_max(1), Some(11));
    // Rewind sequence 1 and evaluate the tail again.
    c.seq_rm(Some(1), 10, -1);
    assert_eq!(c.seq_pos_max(1), Some(9));
    let again = last_logits(&mut c, &PROMPT[10..], 10, 1);
    assert!(max_diff(&full, &again) < 1e-5);
    c.seq_rm(None, 0, -1);
    assert_eq!((c.seq_pos_max(0), c.seq_pos_max(1)), (None, None));
}

#[test]
fn bad_batches_are_rejected_without_changes() {
    let m = tiny("tiny-llama-spm-e64-f32.gguf");
    let mut c = ctx(&m, 16, 512, 1);
    c.decode(&Batch::from_tokens(&PROMPT[..4], 0, 0)).unwrap();
    let gap = c.decode(&Batch::from_tokens(&PROMPT[4..6], 7, 0));
    assert!(matches!(gap, Err(Error::InvalidArgument(_))), "{gap:?}");
    let vocab = c.decode(&Batch::from_tokens(&[40000], 4, 0));
    assert!(matches!(vocab, Err(Error::InvalidArgument(_))));
    let seq = c.decode(&Batch::from_tokens(&[5], 0, 3));
    assert!(matches!(seq, Err(Error::InvalidArgument(_))));
    assert!(c.decode(&Batch::new()).is_err());
    let full = c.decode(&Batch::from_tokens(&[5; 13], 4, 0));
    assert!(matches!(full, Err(Error::KvCacheFull(_))), "{full:?}");
    assert_eq!(
        c.seq_pos_max(0),
        Some(3),
        "nothing of the failed batches was kept"
    );
    c.decode(&Batch::from_tokens(&PROMPT[4..6], 4, 0)).unwrap();
}

#[test]
fn context_shift_keeps_generation_going() {
    let m = tiny("tiny-llama-spm-e64-f16.gguf");
    let mut c = ctx(&m, 32, 8, 1);
    let params = GenerateParams {
        n_predict: 100,
        n_keep: 4,
        seq: 0,
    };
    // A prompt longer than the context, then a generation well past it.
    let prompt: Vec<u32> = PROMPT.iter().cycle().take(70).copied().collect();
    let out = generate_greedy(&mut c, &prompt, &params, |_| true).unwrap();
    assert_eq!(out.len(), 100);
    assert!(out.iter().all(|&t| (t as usize) < m.n_vocab()));
    let (min, max) = (c.seq_pos_min(0).unwrap(), c.seq_pos_max(0).unwrap());
    assert_eq!(min, 0, "the kept prefix is still there");
    assert!(max < 32, "the sequence fits its context ({max})");
    // A prompt that cannot fit even after shifting (n_keep + chunk > context) is an error.
    assert!(c.make_room(0, 30, 8, c.n_ctx_seq() as usize).is_err());
}

#[test]
fn shifting_keeps_relative_positions() {
    // RoPE attention depends only on relative positions. Evaluate the prompt, drop its first four
    // tokens, then (a) shift the rest down by four or (b) leave them where they are: the next
    // token's logits must agree, which holds only if the shift re-rotated the cached keys.
    let m = tiny("tiny-llama-spm-e64-f32.gguf");
    let next = [1576u32];
    let mut a = ctx(&m, 64, 512, 1);
    last_logits(&mut a, &PROMPT, 0, 0);
    a.seq_rm(Some(0), 0, 4);
    a.seq_add(0, 4, -1, -4);
    assert_eq!((a.seq_pos_min(0), a.seq_pos_max(0)), (Some(0), Some(7)));
    let shifted = last_logits(&mut a, &next, 8, 0);
    let mut b = ctx(&m, 64, 512, 1);
    last_logits(&mut b, &PROMPT, 0, 0);
    b.seq_rm(Some(0), 0, 4);
    let unshifted = last_logits(&mut b, &next, 12, 0);
    let d = max_diff(&shifted, &unshifted);
    // Re-rotated keys are rounded to f16 a second time; a wrong rotation is off by whole units.
    assert!(d < 1e-2, "shifted vs unshifted: {d}");
    assert_eq!(argmax(&shifted), argmax(&unshifted));
}

#[test]
fn q8_0_cache_needs_whole_blocks_per_head() {
    // Head size 16 is not a whole Q8_0 block: refused with a clear error.
    let m = tiny("tiny-llama-spm-e64-f32.gguf");
    let c = Context::new(
        m,
        ContextParams {
            n_ctx: 64,
            kv_type: KvType::Q8_0,
            ..Default::default()
        },
    );
    assert!(matches!(c, Err(Error::InvalidArgument(_))));
}

#[test]
fn pooled_embeddings_are_batch_split_invariant() {
    let m = tiny("tiny-llama-spm-e64-f32.gguf");
    let p = |n_batch| ContextParams {
        n_ctx: 64,
        n_batch,
        n_seq_max: 2,
        n_threads: 2,
        embeddings: true,
        ..Default::default()
    };
    let mut a = Context::new(m.clone(), p(512)).unwrap();
    let mut batch = Batch::from_tokens(&PROMPT, 0, 0);
    batch.add(1, 0, 1, false).add(450, 1, 1, false);
    a.decode(&batch).unwrap();
    let e0 = a.embeddings(0).unwrap().to_vec();
    let e1 = a.embeddings(1).unwrap().to_vec();
    assert_eq!(e0.len(), m.n_embd());
    // The mean of the last hidden states, not scaled to unit length.
    let norm: f32 = e0.iter().map(|v| v * v).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 1e-3, "{norm}");
    assert!(
        max_diff(&e0, &e1) > 1e-3,
        "different sequences, different embeddings"
    );
    let mut b = Context::new(m.clone(), p(5)).unwrap();
    b.decode(&batch).unwrap();
    assert!(max_diff(&e0, b.embeddings(0).unwrap()) < 1e-5);
    assert!(b.logits(PROMPT.len() - 1).is_some());
}

#[path = "models/tiny_model.rs"]
mod tiny_model;

fn tiny_gemma3(dir: &tempfile::TempDir) -> Arc<Model> {
    let path = dir.path().join("gemma3.gguf");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    tiny_model::write(tiny_model::spec("tiny-gemma3-f16"), &fixtures, &path);
    Model::load(path, &ModelParams::default()).unwrap()
}

#[test]
fn sliding_window_layers_keep_a_small_cache() {
    let dir = tempfile::tempdir().unwrap();
    let m = tiny_gemma3(&dir);
    assert_eq!(m.sliding_window(), Some(tiny_model::GEMMA3_WINDOW));
    let c = ctx(&m, 4096, 8, 1);
    // One global layer with 4096 cells, five windowed layers with window + batch = 12 cells;
    // each cell holds one KV head of 32 keys and 32 values in f16.
    let per_cell = 2 * 32 * 2;
    assert_eq!(c.kv_size_bytes(), per_cell * (4096 + 5 * 12));
    let est = m.estimate_memory(4096, 8, 1, KvType::F16);
    assert_eq!(est.kv_cache, c.kv_size_bytes() as u64);
    assert_eq!(est.weights, m.weights_size());
}

/// Decode steps past a thousand cells split a KV head's attention over the threads twice (scores
/// by cells, then sums by values: `split_decode_attention`, on tiers that read f16 values as
/// they are, AVX-512); their logits keep the bits of the same positions in one batch (which
/// does not split), for one sequence and for two sequences stepped together (4 threads: one
/// task per sequence, KV head and part), whose cells do not start on a block.
#[test]
fn long_decode_steps_give_the_bits_of_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let m = tiny_gemma3(&dir);
    let (n, steps) = (1100usize, 6usize);
    let tokens = |seq: usize| -> Vec<u32> {
        (0..n)
            .map(|i| 3 + ((i * 7919 + seq * 131) % 509) as u32)
            .collect()
    };
    let context = |n_seq: u32, n_threads: usize| {
        let params = ContextParams {
            n_ctx: 2 * n as u32 + 64,
            n_batch: 2048,
            n_seq_max: n_seq,
            n_threads,
            ..Default::default()
        };
        Context::new(m.clone(), params).unwrap()
    };
    // Each sequence's last `steps` positions in one batch.
    let whole: Vec<Vec<Vec<f32>>> = (0..2)
        .map(|seq| {
            let mut c = context(1, 2);
            let mut b = Batch::new();
            for (i, &t) in tokens(seq).iter().enumerate() {
                b.add(t, i as i32, 0, i >= n - steps);
            }
            c.decode(&b).unwrap();
            (n - steps..n).map(|i| c.logits(i).unwrap().to_vec()).collect()
        })
        .collect();
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    for (n_seq, n_threads) in [(1usize, 2usize), (2, 4)] {
        let mut c = context(n_seq as u32, n_threads);
        for seq in 0..n_seq {
            c.decode(&Batch::from_tokens(&tokens(seq)[..n - steps], 0, seq as u32))
                .unwrap();
        }
        for step in 0..steps {
            let i = n - steps + step;
            let mut b = Batch::new();
            for seq in 0..n_seq {
                b.add(tokens(seq)[i], i as i32, seq as u32, true);
            }
            c.decode(&b).unwrap();
            for (seq, want) in whole.iter().enumerate().take(n_seq) {
                let got = c.logits(seq).unwrap();
                assert!(
                    same(got, &want[step]),
                    "{n_seq} sequences, sequence {seq}, position {i}: logits differ by {}",
                    max_diff(got, &want[step])
                );
            }
        }
    }
}

#[test]
fn sliding_window_model_generates_past_its_context() {
    let dir = tempfile::tempdir().unwrap();
    let m = tiny_gemma3(&dir);
    let mut c = ctx(&m, 16, 4, 1);
    let prompt = tiny_model::prompt();
    let params = GenerateParams {
        n_predict: 40,
        n_keep: 1,
        seq: 0,
    };
    let out = generate_greedy(&mut c, &[prompt.clone(), prompt].concat(), &params, |_| true).unwrap();
    assert_eq!(out.len(), 40);
    assert!(c.seq_pos_max(0).unwrap() < 16);
}

#[test]
fn q8_0_cache_is_close_to_f16() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("qwen3.gguf");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    tiny_model::write(tiny_model::spec("tiny-qwen3-f16"), &fixtures, &path);
    let m = Model::load(path, &ModelParams::default()).unwrap();
    let prompt = tiny_model::prompt();
    let f16 = last_logits(&mut ctx(&m, 64, 512, 1), &prompt, 0, 0);
    let mut q8 = Context::new(
        m.clone(),
        ContextParams {
            n_ctx: 64,
            kv_type: KvType::Q8_0,
            n_threads: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let q8 = last_logits(&mut q8, &prompt, 0, 0);
    let d = max_diff(&f16, &q8);
    assert!(d > 0.0 && d < 5e-2, "q8_0 vs f16 cache: {d}");
    assert_eq!(argmax(&f16), argmax(&q8));
}

/// A prompt's logits at every position have the same bits in one batch (the batched matrix
/// kernels) as token by token (decode's): so a prompt-cache hit, which skips the prompt's
/// batch, or a slot decoding beside others never changes a reply. Run on each tier the machine
/// has, with the quantized tiny models (NEON under qemu by `scripts/aarch64-test.sh`).
#[test]
fn a_batch_gives_the_bits_of_token_by_token() {
    for name in [
        "tiny-llama-spm-e64-q4_0.gguf",
        "tiny-llama-spm-e64-q8_0.gguf",
        "tiny-llama-spm-e256-q4_k_m.gguf",
        "tiny-llama-spm-e256-tied-q6_k.gguf",
    ] {
        assert_batch_gives_the_bits_of_token_by_token(name, &tiny(name), &PROMPT);
    }
}

/// The same for phi3, whose Q/K/V and gate/up matrices are each one fused tensor read as row
/// ranges: quantized to the 32-element formats and to the K-quant mix.
#[test]
fn a_batch_gives_the_bits_of_token_by_token_with_fused_matrices() {
    const PHI3: tiny_model::Spec = tiny_model::Spec {
        name: "tiny-phi3-e256-f32",
        arch: "phi3",
        n_layer: 2,
        n_embd: 256,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 256,
        n_ctx_train: 4096,
        rope_base: 10000.0,
        eps: 1e-5,
        ty: engine::quant::GgmlType::F32,
        seed: 14,
    };
    let dir = tempfile::tempdir().unwrap();
    let f32_path = dir.path().join("phi3-f32.gguf");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    tiny_model::write(&PHI3, &fixtures, &f32_path);
    for ftype in [FileType::Q4_0, FileType::Q8_0, FileType::Q4_K_M] {
        let path = dir.path().join(format!("phi3-{ftype:?}.gguf"));
        quantize_file(&f32_path, &path, &QuantizeOptions::new(ftype), |_| {}).unwrap();
        let m = Model::load(&path, &ModelParams::default()).unwrap();
        assert_batch_gives_the_bits_of_token_by_token(&format!("phi3 {ftype:?}"), &m, &tiny_model::prompt());
    }
}

fn assert_batch_gives_the_bits_of_token_by_token(name: &str, m: &Arc<Model>, prompt: &[u32]) {
    let mut c = ctx(m, 64, 512, 1);
    let mut batch = Batch::new();
    for (i, &t) in prompt.iter().enumerate() {
        batch.add(t, i as i32, 0, true);
    }
    c.decode(&batch).unwrap();
    let whole: Vec<Vec<f32>> = (0..prompt.len()).map(|i| c.logits(i).unwrap().to_vec()).collect();
    let mut c = ctx(m, 64, 512, 1);
    for (i, &t) in prompt.iter().enumerate() {
        let one = last_logits(&mut c, &[t], i as i32, 0);
        assert!(
            one.iter().zip(&whole[i]).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{name} position {i}: logits differ by {}",
            max_diff(&one, &whole[i])
        );
    }
}

/// A sequence's logits have the same bits whichever KV cells it was given: with another
/// sequence's tokens (or freed cells) before it, its cells straddle the attention's blocks of
/// cells differently, and a parallel request must not change a request's answer.
#[test]
fn logits_do_not_depend_on_the_cells_a_sequence_gets() {
    let m = tiny("tiny-llama-spm-e64-f16.gguf");
    // The prompt, then tokens one at a time, as generation feeds them.
    let tokens: Vec<u32> = PROMPT.iter().cycle().take(90).copied().collect();
    let run = |before: usize, keep_other: bool| -> Vec<Vec<f32>> {
        let mut c = ctx(&m, 256, 512, 2);
        if before > 0 {
            let other: Vec<u32> = (0..before as u32).map(|i| 100 + i).collect();
            c.decode(&Batch::from_tokens(&other, 0, 1)).unwrap();
            if !keep_other {
                c.seq_rm(Some(1), 0, -1);
            }
        }
        let mut out = vec![last_logits(&mut c, &tokens[..12], 0, 0)];
        for (i, &t) in tokens.iter().enumerate().skip(12) {
            out.push(last_logits(&mut c, &[t], i as i32, 0));
        }
        out
    };
    let alone = run(0, false);
    for (before, keep_other) in [(1, true), (5, true), (40, false), (63, true), (100, false)] {
        let moved = run(before, keep_other);
        for (step, (a, b)) in alone.iter().zip(&moved).enumerate() {
            assert!(
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "step {step} with {before} cells before the sequence: logits differ by {}",
                max_diff(a, b)
            );
        }
    }
}
