//! AMX-INT8 tiles for Q6_K batches: the `Amx` tier (the AVX-512 tier plus AMX-INT8).
//!
//! On AVX-512 a Q6_K batch is bound by its 16-element sub-blocks: every sub-block's integer sum
//! needs its own float step (convert, multiply-add by the row's scale) next to four `vpdpbusd`s.
//! Here the sub-block scales go into the weights instead: at unpack time each value becomes
//! `p = (q - 32) · sc`, exact in 13 bits, split as `p = 64 · hi + lo` into two signed bytes
//! (`hi` in -64..64, `lo` in 0..63). Two `tdpbssd`s per 64 elements (16 tokens x 16 rows each)
//! then sum a whole super-block in the tiles with no float step, and a super-block's integer
//! sum `Σ sc · Σ (q - 32) · a` (llama.cpp's `isum`) is `64 · C_hi + C_lo`, scaled once by
//! `d_row`, then `d_token`. A packed step (64 bytes: four elements of a group's 16 rows, see
//! `kernels::packed`) is exactly a row of `tdpbssd`'s B operand, so 16 steps are a B tile.
//!
//! The tiles take whole tiles of 16 tokens of batches of at least [`MIN_TOKENS`]; the other
//! tokens (decode, short batches, the tokens past the last whole tile) go through the AVX-512
//! super-block kernels with `PkQ6KInt`, which compute the same integer per super-block
//! (`vpdpbusd` per sub-block, times the scale in i32) and the same float steps in the same
//! order: a token gets the same bits alone or in a batch, as on every tier.
//!
//! Stable Rust has no AMX intrinsics: the tile instructions are `asm!`. Linux hands a process
//! the tile state only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), made once by
//! [`available`].

use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::{d16, packed_q6k_int, unpacked_group, PkArgs, PkQ6K, PkQ6KInt, SbType};

/// Whether this CPU has AMX-INT8 and the OS lets this process use the tiles.
pub(in crate::kernels) fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        // SAFETY: cpuid is always available on x86-64.
        let leaf7 = __cpuid_count(7, 0);
        let (tile, int8) = (leaf7.edx >> 24 & 1 == 1, leaf7.edx >> 25 & 1 == 1);
        tile && int8 && request_tile_state()
    })
}

/// Asks Linux for the tile data state (XTILEDATA, feature 18) for this process.
#[cfg(target_os = "linux")]
fn request_tile_state() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: arch_prctl with these arguments only changes the process's permitted xsave
    // features; the syscall clobbers rcx and r11 and nothing else.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

#[cfg(not(target_os = "linux"))]
fn request_tile_state() -> bool {
    false
}

/// Tokens per tile (the rows of A and C).
const TOKENS: usize = 16;

/// Bytes of one unpacked super-block of a group: the rows' f32 `d`, then for each 64-element
/// quarter its `hi` and its `lo` B tiles (16 steps of 64 bytes each).
const UNPACKED: usize = 64 + 4 * 2 * 1024;

/// Super-blocks a batch unpacks at a time: their B tiles stay in L1 while every tile of tokens
/// reads them.
const CHUNK: usize = 2;

/// Tokens a call takes at most (`matmul`'s token block).
pub(in crate::kernels) const MAX_TOKENS: usize = 128;

/// Smallest batch whose whole tiles of 16 tokens go on the tiles. Below it the AVX-512
/// kernels with the tiles' sums are faster: whole forward passes of a 1.1B Q6_K model
/// (`ollamars bench -p N -n 0`, 2 threads) ran 0.82-0.95x as fast with 48-80-token batches on
/// the tiles, the same at 96 and 1.10x at 112.
pub(in crate::kernels) const MIN_TOKENS: usize = 96;

/// How many of a call's `n` tokens (from its first) go on the tiles.
fn on_tiles(n: usize) -> usize {
    if n >= MIN_TOKENS {
        n / TOKENS * TOKENS
    } else {
        0
    }
}

/// The f32 sums of a group's 16 rows for each token of a call (16 floats a token): written
/// out once at the end. Consecutive tokens' output rows lie a matrix height apart, which maps
/// them to one or two L1 sets; updating them per super-block missed L1 every time.
#[repr(C, align(64))]
struct Acc([f32; 16 * MAX_TOKENS]);

/// Bytes of a token's row of quants in [`Act`]: one super-block.
const ACT_ROW: usize = 256;

/// A batch's whole tiles of 16 tokens, their Q8_K quants copied per super-block and tile of
/// tokens into 4 KiB blocks (16 rows of [`ACT_ROW`] bytes, 64-byte aligned): an A tile is then
/// 16 whole cache lines close together, where in place its rows lay a token's activations
/// apart (up to 6.4 KiB) and across two lines each. See [`pack_act`].
#[derive(Clone, Copy)]
pub(in crate::kernels) struct Act {
    base: *const u8,
    /// Tiles of tokens.
    n_tt: usize,
}

impl Act {
    /// Super-block `sb` of token tile `i`; token tile `i + 1`'s is 4 KiB on.
    #[inline(always)]
    unsafe fn tile(self, sb: usize, i: usize) -> *const u8 {
        self.base.add((sb * self.n_tt + i) * TOKENS * ACT_ROW)
    }
}

thread_local! {
    /// Each thread's [`Act`] buffer.
    static ACT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Copies the quants of `tokens`' whole tiles of 16 into the thread's [`Act`] buffer, valid until
/// the thread's next call. Done once per block of tokens for all of a thread's groups.
///
/// # Safety
/// `g` describes Q8_K activations of a Q6_K product (as for [`packed_q6k`]), `tokens` within it.
pub(in crate::kernels) unsafe fn pack_act(g: &PkArgs, tokens: std::ops::Range<usize>) -> Act {
    let n_tt = on_tiles(tokens.len()) / TOKENS;
    let bytes = g.n_tiles * n_tt * TOKENS * ACT_ROW;
    let base = ACT.with(|cell| {
        let mut buf = cell.borrow_mut();
        buf.resize(bytes + 64, 0);
        buf.as_mut_ptr()
    });
    let base = base.add(base.align_offset(64));
    let qoff = g.side.qoff.as_ptr();
    for i in 0..n_tt * TOKENS {
        let row = g.xq.as_ptr().add((tokens.start + i) * g.row_bytes);
        for sb in 0..g.n_tiles {
            let src = row.add(*qoff.add(sb * PkQ6K::SUBS) as usize);
            let dst = base.add((sb * n_tt + i / TOKENS) * TOKENS * ACT_ROW + (i % TOKENS) * ACT_ROW);
            std::ptr::copy_nonoverlapping(src, dst, ACT_ROW);
        }
    }
    Act { base, n_tt }
}

/// A thread's buffers for [`packed_q6k`].
struct Scratch {
    acc: Acc,
    sums: [Sums; 2],
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Option<Box<Scratch>>> = const { std::cell::RefCell::new(None) };
}

/// `ldtilecfg`'s operand, palette 1: eight tiles of 16 rows x 64 bytes. `tmm0`-`tmm3` the
/// sums (`hi` and `lo` of token tiles 0 and 1), `tmm4`/`tmm5` the activations of token tiles
/// 0 and 1, `tmm6`/`tmm7` the `hi` and `lo` weights.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    fn new() -> TileConfig {
        let mut c = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        for t in 0..8 {
            (c.colsb[t], c.rows[t]) = (64, TOKENS as u8);
        }
        c
    }
}

/// Unpacks packed Q6_K super-block `t` of a group into `b` (see [`UNPACKED`]).
#[inline(always)]
unsafe fn unpack(t: *const u8, b: *mut u8) {
    _mm512_storeu_ps(b as *mut f32, d16(t));
    // Byte 4L+i of a step from the 16-bit products: elements 0 and 2 of lane L are the low
    // bytes of `even`'s two words there, elements 1 and 3 those of `odd` (index bit 6).
    let idx = _mm512_set_epi32(
        0x7e3e7c3c, 0x7a3a7838, 0x76367434, 0x72327030, 0x6e2e6c2c, 0x6a2a6828, 0x66266424, 0x62226020,
        0x5e1e5c1c, 0x5a1a5818, 0x56165414, 0x52125010, 0x4e0e4c0c, 0x4a0a4808, 0x46064404, 0x42024000,
    );
    let (m63, mff) = (_mm512_set1_epi8(63), _mm512_set1_epi32(0xff));
    let mut w = [_mm512_setzero_si512(); 8];
    for j in 0..PkQ6K::SUBS {
        // The rows' scale (one row per 32-bit lane) as bytes `sc 0 sc 0` and `0 sc 0 sc`, and
        // `32 · sc` in both 16-bit halves.
        let sc = PkQ6KInt::int_scale(t, j);
        let x = _mm512_and_si512(sc, mff);
        let even_sc = _mm512_or_si512(x, _mm512_slli_epi32(x, 16));
        let odd_sc = _mm512_slli_epi32(even_sc, 8);
        let s5 = _mm512_slli_epi32(sc, 5);
        let off = _mm512_or_si512(
            _mm512_and_si512(s5, _mm512_set1_epi32(0xffff)),
            _mm512_slli_epi32(s5, 16),
        );
        PkQ6K::steps(t, j, &mut w);
        let quarter = b.add(64 + (j / 4) * 2048);
        for (k, w) in w.iter().enumerate().take(PkQ6K::STEPS) {
            // q · sc (q unsigned 0..63, the other byte of each pair times 0: no saturation),
            // minus 32 · sc: (q - 32) · sc in -4064..4096.
            let even = _mm512_sub_epi16(_mm512_maddubs_epi16(*w, even_sc), off);
            let odd = _mm512_sub_epi16(_mm512_maddubs_epi16(*w, odd_sc), off);
            let lo = _mm512_and_si512(_mm512_permutex2var_epi8(even, idx, odd), m63);
            let hi = _mm512_permutex2var_epi8(_mm512_srai_epi16(even, 6), idx, _mm512_srai_epi16(odd, 6));
            let row = 4 * (j % 4) + k;
            _mm512_storeu_si512(quarter.add(64 * row) as *mut _, hi);
            _mm512_storeu_si512(quarter.add(1024 + 64 * row) as *mut _, lo);
        }
    }
}

/// The sums of one super-block for two tiles of tokens: `hi`, `lo` of tile 0, then of tile 1
/// (16 tokens x 16 rows of i32 each).
#[repr(C, align(64))]
struct Sums([i32; 4 * 256]);

/// The `hi` and `lo` sums of super-block `b` (unpacked) with `NT` tiles of tokens, their
/// activations at `a` and `a + 16 * stride` (`stride` apart), into `sums`.
#[inline(always)]
unsafe fn tile_products<const NT: usize>(a: *const u8, stride: usize, b: *const u8, sums: *mut i32) {
    let b = b.add(64);
    if NT == 2 {
        let a1 = a.add(TOKENS * stride);
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm6, [{b} + {s64} * 1]",
            "tileloadd tmm7, [{b} + {s64} * 1 + 1024]",
            "tileloadd tmm4, [{a0} + {sa} * 1]",
            "tileloadd tmm5, [{a1} + {sa} * 1]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tileloadd tmm6, [{b} + {s64} * 1 + 2048]",
            "tileloadd tmm7, [{b} + {s64} * 1 + 3072]",
            "tileloadd tmm4, [{a0} + {sa} * 1 + 64]",
            "tileloadd tmm5, [{a1} + {sa} * 1 + 64]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tileloadd tmm6, [{b} + {s64} * 1 + 4096]",
            "tileloadd tmm7, [{b} + {s64} * 1 + 5120]",
            "tileloadd tmm4, [{a0} + {sa} * 1 + 128]",
            "tileloadd tmm5, [{a1} + {sa} * 1 + 128]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tileloadd tmm6, [{b} + {s64} * 1 + 6144]",
            "tileloadd tmm7, [{b} + {s64} * 1 + 7168]",
            "tileloadd tmm4, [{a0} + {sa} * 1 + 192]",
            "tileloadd tmm5, [{a1} + {sa} * 1 + 192]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tilestored [{c} + {s64} * 1], tmm0",
            "tilestored [{c} + {s64} * 1 + 1024], tmm1",
            "tilestored [{c} + {s64} * 1 + 2048], tmm2",
            "tilestored [{c} + {s64} * 1 + 3072], tmm3",
            a0 = in(reg) a, a1 = in(reg) a1, sa = in(reg) stride, b = in(reg) b,
            c = in(reg) sums, s64 = in(reg) 64usize,
            options(nostack),
        );
    } else {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tileloadd tmm6, [{b} + {s64} * 1]",
            "tileloadd tmm7, [{b} + {s64} * 1 + 1024]",
            "tileloadd tmm4, [{a0} + {sa} * 1]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tileloadd tmm6, [{b} + {s64} * 1 + 2048]",
            "tileloadd tmm7, [{b} + {s64} * 1 + 3072]",
            "tileloadd tmm4, [{a0} + {sa} * 1 + 64]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tileloadd tmm6, [{b} + {s64} * 1 + 4096]",
            "tileloadd tmm7, [{b} + {s64} * 1 + 5120]",
            "tileloadd tmm4, [{a0} + {sa} * 1 + 128]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tileloadd tmm6, [{b} + {s64} * 1 + 6144]",
            "tileloadd tmm7, [{b} + {s64} * 1 + 7168]",
            "tileloadd tmm4, [{a0} + {sa} * 1 + 192]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tilestored [{c} + {s64} * 1], tmm0",
            "tilestored [{c} + {s64} * 1 + 1024], tmm1",
            a0 = in(reg) a, sa = in(reg) stride, b = in(reg) b,
            c = in(reg) sums, s64 = in(reg) 64usize,
            options(nostack),
        );
    }
}

/// A super-block's sums waiting for their float step: scaled after the next products are
/// issued, because reading a tile store back at once waits for it.
#[derive(Clone, Copy)]
struct Pending {
    /// The super-block and where it lies unpacked.
    tile: usize,
    tp: *const u8,
    /// Its tiles of tokens: `nt` from `t0`.
    t0: usize,
    nt: usize,
    /// Which sums buffer holds them.
    buf: usize,
}

/// `NT` tiles of 16 tokens from `t0` against a group's unpacked super-blocks `tiles` at `src`:
/// their products, each scaled into `out` (see [`scale_sums`]) after the next ones are issued.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn token_tiles<const NT: usize>(
    g: &PkArgs,
    src: *const u8,
    tiles: std::ops::Range<usize>,
    t0: usize,
    sums: &mut [Sums; 2],
    pending: &mut Option<Pending>,
    acc: &mut Acc,
    t_base: usize,
    act: Act,
) {
    let first = tiles.start;
    for tile in tiles.clone() {
        let tp = src.add((tile - first) * UNPACKED);
        let a = act.tile(tile, (t0 - t_base) / TOKENS);
        let buf = pending.map_or(0, |p| 1 - p.buf);
        tile_products::<NT>(a, ACT_ROW, tp, sums[buf].0.as_mut_ptr());
        if let Some(p) = pending.take() {
            scale_sums(g, p, &sums[p.buf], acc, t_base);
        }
        *pending = Some(Pending {
            tile,
            tp,
            t0,
            nt: NT,
            buf,
        });
    }
}

/// The float step of the pending super-block: `out += ((64 · hi + lo) · d_row) · d_token` for
/// its tokens, from zero at the first super-block. The row's scale first, then the token's:
/// the AVX-512 tier's order (see `Isa::Amx` for what the other order did).
#[inline(always)]
unsafe fn scale_sums(g: &PkArgs, p: Pending, sums: &Sums, acc: &mut Acc, t_base: usize) {
    let n_sub = g.side.n_sub;
    let sd = g.side.d.as_ptr();
    let dr = _mm512_loadu_ps(p.tp as *const f32);
    for c in 0..p.nt * TOKENS {
        let s = sums.0.as_ptr().add(512 * (c / TOKENS) + 16 * (c % TOKENS));
        let hi = _mm512_load_si512(s as *const _);
        let lo = _mm512_load_si512(s.add(256) as *const _);
        let x = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi, 6), lo));
        let t = p.t0 + c;
        let dt = _mm512_set1_ps(*sd.add(t * n_sub + p.tile * PkQ6K::SUBS));
        let o = acc.0.as_mut_ptr().add(16 * (t - t_base));
        let acc = if p.tile == 0 {
            _mm512_setzero_ps()
        } else {
            _mm512_loadu_ps(o)
        };
        _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_mul_ps(x, dr), dt, acc));
    }
}

/// `n_groups` (1 or 2) packed Q6_K groups from `group`, `gstride` apart (rows to `out + 16 r`),
/// against `tokens`: whole tiles of 16 tokens on AMX ([`on_tiles`]), the rest through
/// `packed_q6k_int`.
///
/// # Safety
/// [`available`] returned true, the CPU has the AVX-512 tier, and the arguments describe
/// packed Q6_K groups and their batch as for the AVX-512 packed kernels.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[allow(clippy::too_many_arguments)]
pub(in crate::kernels) unsafe fn packed_q6k(
    g: &PkArgs,
    group: *const u8,
    gstride: usize,
    n_groups: usize,
    tokens: std::ops::Range<usize>,
    act: Act,
    out: *mut f32,
    os: usize,
) {
    assert!(
        tokens.len() <= MAX_TOKENS,
        "at most {MAX_TOKENS} tokens at a time"
    );
    let whole = on_tiles(tokens.len());
    if whole > 0 {
        let buf = unpacked_group(CHUNK * UNPACKED);
        // Made once per thread: zeroing 16 KiB per call was 1.3% of a prompt.
        let scratch = SCRATCH.with(|cell| {
            let mut s = cell.borrow_mut();
            let s = s.get_or_insert_with(|| {
                Box::new(Scratch {
                    acc: Acc([0.0; 16 * MAX_TOKENS]),
                    sums: [Sums([0; 4 * 256]), Sums([0; 4 * 256])],
                })
            });
            &mut **s as *mut Scratch
        });
        // SAFETY: the thread's scratch, lent out like `unpacked_group`: nothing else touches it
        // until this call returns.
        let Scratch { acc, sums } = &mut *scratch;
        let cfg = TileConfig::new();
        asm!("ldtilecfg [{}]", in(reg) &cfg, options(nostack, readonly));
        for r in 0..n_groups {
            let group = group.add(r * gstride);
            let out = out.add(16 * r);
            let mut s0 = 0;
            while s0 < g.n_tiles {
                let tiles = s0..(s0 + CHUNK).min(g.n_tiles);
                for (i, tile) in tiles.clone().enumerate() {
                    unpack(group.add(tile * PkQ6K::TILE), buf.add(i * UNPACKED));
                }
                let mut t = tokens.start;
                let mut pending = None;
                while t + 2 * TOKENS <= tokens.start + whole {
                    token_tiles::<2>(
                        g,
                        buf,
                        tiles.clone(),
                        t,
                        sums,
                        &mut pending,
                        acc,
                        tokens.start,
                        act,
                    );
                    t += 2 * TOKENS;
                }
                if t < tokens.start + whole {
                    token_tiles::<1>(
                        g,
                        buf,
                        tiles.clone(),
                        t,
                        sums,
                        &mut pending,
                        acc,
                        tokens.start,
                        act,
                    );
                }
                // The next chunk's unpacking overwrites the pending super-block's scales.
                if let Some(p) = pending {
                    scale_sums(g, p, &sums[p.buf], acc, tokens.start);
                }
                s0 = tiles.end;
            }
            for i in 0..whole {
                let v = _mm512_load_ps(acc.0.as_ptr().add(16 * i));
                _mm512_storeu_ps(out.add((tokens.start + i) * os), v);
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
    if whole < tokens.len() {
        packed_q6k_int(
            g,
            group,
            gstride,
            n_groups,
            tokens.start + whole..tokens.end,
            out,
            os,
        );
    }
}
