//! What a forward pass allocates for a long batch: the heap in use at its peak, counted by a
//! global allocator (not timed, not the process RSS). A prompt is evaluated in one micro-batch of
//! 512 tokens; only the residual stream, the queries, the attention output and the per-token
//! lists of visible cells may span the whole batch, while the row-wise steps (projections and the
//! FFN, whose buffers are `n_ff` wide) work on bounded chunks of rows. Evaluating the FFN of all
//! 512 rows at once would take 512 x 2048 x 4 bytes for each of gate and up (8 MiB), far over the
//! bound below.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use engine::quant::GgmlType;
use engine::{Batch, Context, ContextParams, KvType, Model, ModelParams};

#[path = "models/tiny_model.rs"]
mod tiny_model;

struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// A llama model whose FFN is 32 times wider than its residual stream (Gemma 3 270M: 3.2x,
/// Qwen2.5 0.5B: 5.4x), so that whole-batch FFN buffers would dominate.
const WIDE_FFN: tiny_model::Spec = tiny_model::Spec {
    name: "wide-ffn-llama-f32",
    arch: "llama",
    n_layer: 2,
    n_embd: 64,
    n_head: 4,
    n_head_kv: 2,
    head_dim: 16,
    n_ff: 2048,
    n_ctx_train: 4096,
    rope_base: 10000.0,
    eps: 1e-5,
    ty: GgmlType::F32,
    seed: 21,
};

#[test]
fn a_long_batch_takes_bounded_work_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wide.gguf");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    tiny_model::write(&WIDE_FFN, &fixtures, &path);
    let model = Model::load(&path, &ModelParams::default()).unwrap();
    let n = 512;
    let mut ctx = Context::new(
        model.clone(),
        ContextParams {
            n_ctx: n as u32,
            n_batch: n as u32,
            n_threads: 2,
            kv_type: KvType::F16,
            ..ContextParams::default()
        },
    )
    .unwrap();
    // One token first, so that lazily created per-thread state is not counted below.
    ctx.decode(&Batch::from_tokens(&[1], 0, 0)).unwrap();
    ctx.clear();
    let tokens: Vec<u32> = (0..n as u32).map(|i| i * 7 % 512).collect();
    let batch = Batch::from_tokens(&tokens, 0, 0);

    let base = IN_USE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    ctx.decode(&batch).unwrap();
    let peak = PEAK.load(Ordering::Relaxed) - base;
    assert!(ctx.logits(n - 1).is_some());

    // Whole-batch rows: residual stream (64), queries and attention output (64 each), f32;
    // the visible-cell lists (n^2 / 2 u32); RoPE angles (16 per token). The rest is per chunk
    // of rows: gate, up and the activations converted for the down projection, 2048 wide, and
    // smaller buffers (about 3.3 MiB for chunks of 128 rows).
    let whole = n * 4 * (3 * 64 + 16) + n * n / 2 * 4;
    let bound = whole + (4 << 20);
    assert!(
        peak < bound,
        "a 512-token forward pass used {peak} bytes of work buffers at its peak, bound {bound}"
    );
    // The counter sees the forward's buffers at all.
    assert!(peak > n * 4 * 64, "peak {peak}");
}
