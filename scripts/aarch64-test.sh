#!/usr/bin/env bash
# Builds the workspace for aarch64 Linux and runs the engine's tests there under qemu, so that the
# NEON tier (engine/src/kernels/neon.rs, compiled only on aarch64) is type-checked, linted and
# compared with the scalar reference like the x86 tiers.
#
#     scripts/aarch64-test.sh [cargo test args...]
#
# This machine's toolchain has only the x86-64 standard library and no other can be fetched, so
# the script builds an aarch64 one: core, alloc, std, std_detect and test come from the sources
# that the toolchain's own `rust-docs` component carries (its rendered source pages, so exactly
# this rustc's library); std's crates.io dependencies at the versions this library builds with;
# and a few stand-ins written here for what the pages leave out (the unwinder's declarations, an
# aborting panic runtime, auxv feature detection, files only other targets compile). That library
# panics by aborting, so the one test that needs unwinding is skipped. Debian's cross gcc links,
# and qemu-user runs the tests with every feature the emulated CPU has (NEON with dotprod).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work="${CARGO_TARGET_DIR:-$root/target}/aarch64-cross"
target=aarch64-unknown-linux-gnu
sysroot="$(rustc --print sysroot)"
docs="$sysroot/share/doc/rust/html/src"

for c in core alloc std std_detect test; do
  [ -d "$docs/$c" ] || { echo "aarch64-test: $docs/$c missing (the toolchain's rust-docs component)" >&2; exit 1; }
done

sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null \
   || [ ! -f /usr/lib/binfmt.d/qemu-aarch64.conf ]; then
  echo "installing gcc-aarch64-linux-gnu and qemu-user..." >&2
  scripts/apt-install.sh gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user qemu-user-binfmt
fi
# Tests that spawn a test binary (an aborting test runs in a child process) need the kernel to
# hand aarch64 executables to qemu.
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  [ -e /proc/sys/fs/binfmt_misc/register ] || $sudo mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  $sudo sh -c 'cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register'
fi

# The library is built once per toolchain and version of this script.
stamp="$(rustc --version) $(sha256sum "$0" | cut -c1-16)"
lib="$work/sysroot/lib/rustlib/$target/lib"
if [ "$(cat "$work/sysroot/.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "building an aarch64 standard library for $(rustc --version)..." >&2
  rm -rf "$work/src" "$work/sysroot" "$work/deps"
  mkdir -p "$work/src" "$lib" "$work/deps/src"

  # The source pages back to files, laid out as in rust-lang/rust's library/ (core's pages also
  # hold stdarch and portable-simd, std's the backtrace crate).
  python3 - "$docs" "$work/src" <<'EOF'
import html, os, re, shutil, sys
docs, out = sys.argv[1], sys.argv[2]
for crate in ["core", "alloc", "std", "std_detect", "test"]:
    for dp, _, files in os.walk(os.path.join(docs, crate)):
        for f in files:
            if not f.endswith(".rs.html"):
                continue
            page = open(os.path.join(dp, f), encoding="utf-8").read()
            m = re.search(r'<pre class="rust"><code>(.*)</code></pre>', page, re.S)
            if not m:
                sys.exit(f"no source in {dp}/{f}")
            code = re.sub(r"<a href=#\d+ id=\d+ data-nosnippet>\d+</a>", "", m.group(1))
            code = html.unescape(re.sub(r"<[^>]+>", "", code))
            rel = os.path.relpath(os.path.join(dp, f[: -len(".html")]), os.path.join(docs, crate))
            dest = os.path.join(out, crate, "src", rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            open(dest, "w", encoding="utf-8").write(code)
for crate, sub in [("core", "stdarch"), ("core", "portable-simd"), ("std", "backtrace")]:
    shutil.move(os.path.join(out, crate, "src", sub), os.path.join(out, sub))
std_simd = os.path.join(out, "std", "src", "portable-simd", "crates", "std_float")
shutil.move(std_simd, os.path.join(out, "portable-simd", "crates", "std_float"))
shutil.rmtree(os.path.join(out, "std", "src", "portable-simd"))
EOF

  src="$work/src"
  # Modules only other targets' documentation builds render: aarch64 Linux needs them empty or
  # small.
  for f in stdarch/crates/core_arch/src/arm_shared/barrier/not_mclass.rs \
           stdarch/crates/core_arch/src/arm_shared/barrier/v8.rs \
           portable-simd/crates/core_simd/src/vendor/arm.rs \
           std/src/sys/pal/unix/sync.rs std/src/sys/pal/unix/thread_parking.rs; do
    : > "$src/$f"
  done
  cat > "$src/stdarch/crates/core_arch/src/arm_shared/barrier/common.rs" <<'EOF'
/// Full system is the required shareability domain, reads and writes are the required access types
#[unstable(feature = "stdarch_arm_barrier", issue = "117219")]
pub struct SY;

dmb_dsb!(SY);

#[unstable(feature = "stdarch_arm_barrier", issue = "117219")]
impl super::super::sealed::Isb for SY {
    #[inline(always)]
    unsafe fn __isb(&self) {
        super::isb(super::arg::SY)
    }
}
EOF
  cat > "$src/backtrace/src/symbolize/noop.rs" <<'EOF'
//! No symbols (std's backtraces without the `backtrace` feature).
use super::{BytesOrWideString, ResolveWhat, SymbolName};
use core::ffi::c_void;
use core::marker;

pub unsafe fn resolve(_addr: ResolveWhat<'_>, _cb: &mut dyn FnMut(&super::Symbol)) {}

pub struct Symbol<'a> {
    _marker: marker::PhantomData<&'a i32>,
}

impl Symbol<'_> {
    pub fn name(&self) -> Option<SymbolName<'_>> {
        None
    }
    pub fn addr(&self) -> Option<*mut c_void> {
        None
    }
    pub fn filename_raw(&self) -> Option<BytesOrWideString<'_>> {
        None
    }
    pub fn lineno(&self) -> Option<u32> {
        None
    }
    pub fn colno(&self) -> Option<u32> {
        None
    }
}

pub unsafe fn clear_symbol_cache() {}
EOF
  mkdir -p "$src/std_detect/src/detect/os/linux"
  cat > "$src/std_detect/src/detect/os/linux/mod.rs" <<'EOF'
//! aarch64 Linux: the features the kernel reports in the auxiliary vector's HWCAP word.
use crate::detect::{Feature, cache};

pub(crate) fn detect_features() -> cache::Initializer {
    let mut value = cache::Initializer::default();
    let hwcap = unsafe { libc::getauxval(libc::AT_HWCAP) };
    for (f, bit) in [
        (Feature::fp, 0),
        (Feature::asimd, 1),
        (Feature::aes, 3),
        (Feature::crc, 7),
        (Feature::lse, 8),
        (Feature::fp16, 9),
        (Feature::rdm, 12),
        (Feature::dotprod, 20),
    ] {
        if hwcap & (1 << bit) != 0 {
            value.set(f as u32);
        }
    }
    value
}
EOF
  sed -i 's/^extern crate alloc;$/extern crate alloc;\n#[allow(unused_extern_crates)]\nextern crate libc;/' "$src/std_detect/src/lib.rs"
  mkdir -p "$src/unwind" "$src/compiler_builtins" "$src/panic_abort"
  cat > "$src/unwind/lib.rs" <<'EOF'
//! The unwinder's declarations std uses (libgcc_s provides them).
#![feature(staged_api)]
#![unstable(feature = "panic_unwind", issue = "32837")]
#![no_std]
#![allow(nonstandard_style)]
use core::ffi::{c_int, c_void};

pub type _Unwind_Word = *const u8;
pub type _Unwind_Ptr = *const u8;
pub type _Unwind_Trace_Fn =
    extern "C" fn(ctx: *mut _Unwind_Context, arg: *mut c_void) -> _Unwind_Reason_Code;
pub type _Unwind_Exception_Class = u64;

#[repr(C)]
#[derive(Debug, Copy, Clone, PartialEq)]
pub enum _Unwind_Reason_Code {
    _URC_NO_REASON = 0,
    _URC_FOREIGN_EXCEPTION_CAUGHT = 1,
    _URC_FATAL_PHASE2_ERROR = 2,
    _URC_FATAL_PHASE1_ERROR = 3,
    _URC_NORMAL_STOP = 4,
    _URC_END_OF_STACK = 5,
    _URC_HANDLER_FOUND = 6,
    _URC_INSTALL_CONTEXT = 7,
    _URC_CONTINUE_UNWIND = 8,
    _URC_FAILURE = 9,
}
pub use _Unwind_Reason_Code::*;

pub type _Unwind_Action = c_int;
pub const _UA_SEARCH_PHASE: c_int = 1;
pub const _UA_CLEANUP_PHASE: c_int = 2;
pub const _UA_HANDLER_FRAME: c_int = 4;
pub const _UA_FORCE_UNWIND: c_int = 8;
pub const _UA_END_OF_STACK: c_int = 16;

pub type _Unwind_Exception_Cleanup_Fn =
    Option<extern "C" fn(unwind_code: _Unwind_Reason_Code, exception: *mut _Unwind_Exception)>;

#[repr(C)]
pub struct _Unwind_Exception {
    pub exception_class: _Unwind_Exception_Class,
    pub exception_cleanup: _Unwind_Exception_Cleanup_Fn,
    pub private: [_Unwind_Word; 2],
}

pub enum _Unwind_Context {}

unsafe extern "C-unwind" {
    pub fn _Unwind_Resume(exception: *mut _Unwind_Exception) -> !;
    pub fn _Unwind_RaiseException(exception: *mut _Unwind_Exception) -> _Unwind_Reason_Code;
}
unsafe extern "C" {
    pub fn _Unwind_DeleteException(exception: *mut _Unwind_Exception);
    pub fn _Unwind_GetLanguageSpecificData(ctx: *mut _Unwind_Context) -> *mut c_void;
    pub fn _Unwind_GetRegionStart(ctx: *mut _Unwind_Context) -> _Unwind_Ptr;
    pub fn _Unwind_GetTextRelBase(ctx: *mut _Unwind_Context) -> _Unwind_Ptr;
    pub fn _Unwind_GetDataRelBase(ctx: *mut _Unwind_Context) -> _Unwind_Ptr;
    pub fn _Unwind_GetGR(ctx: *mut _Unwind_Context, reg_index: c_int) -> _Unwind_Word;
    pub fn _Unwind_SetGR(ctx: *mut _Unwind_Context, reg_index: c_int, value: _Unwind_Word);
    pub fn _Unwind_GetIP(ctx: *mut _Unwind_Context) -> _Unwind_Word;
    pub fn _Unwind_SetIP(ctx: *mut _Unwind_Context, value: _Unwind_Word);
    pub fn _Unwind_GetIPInfo(ctx: *mut _Unwind_Context, ip_before_insn: *mut c_int) -> _Unwind_Word;
    pub fn _Unwind_FindEnclosingFunction(pc: *mut c_void) -> *mut c_void;
    pub fn _Unwind_Backtrace(trace: _Unwind_Trace_Fn, trace_argument: *mut c_void) -> _Unwind_Reason_Code;
}
EOF
  cat > "$src/compiler_builtins/lib.rs" <<'EOF'
//! The compiler's helper routines come from libgcc at link time.
#![no_std]
#![feature(compiler_builtins)]
#![compiler_builtins]
#![allow(internal_features)]

/// std calls this at start-up to switch outline atomics to LSE; libgcc's helpers check for LSE
/// themselves.
#[unsafe(no_mangle)]
pub extern "C" fn __rust_enable_lse() {}
EOF
  cat > "$src/panic_abort/lib.rs" <<'EOF'
//! A panic runtime that aborts.
#![no_std]
#![feature(panic_runtime, staged_api, rustc_attrs, std_internals)]
#![panic_runtime]
#![unstable(feature = "panic_abort", issue = "32837")]
#![allow(internal_features)]

extern crate libc;

#[rustc_std_internal_symbol]
pub unsafe fn __rust_start_panic(_payload: &mut dyn core::panic::PanicPayload) -> u32 {
    unsafe { libc::abort() }
}

#[rustc_std_internal_symbol]
pub unsafe extern "C" fn __rust_panic_cleanup(_: *mut u8) -> *mut (dyn core::any::Any + Send + 'static) {
    unsafe { libc::abort() }
}
EOF

  # std's crates.io dependencies, at the versions rust 1.95's library locks.
  mkdir -p "$work/deps/src"
  cat > "$work/deps/Cargo.toml" <<'EOF'
[package]
name = "aarch64-std-deps"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

[dependencies]
cfg-if = "=1.0.5"
getopts = { version = "=0.2.24", default-features = false }
hashbrown = { version = "=0.16.1", default-features = false }
libc = { version = "=0.2.180", default-features = false }
rustc-demangle = "=0.1.28"
EOF
  : > "$work/deps/src/lib.rs"
  declare -A dep
  while read -r name path; do dep[$name]="$(dirname "$path")/src/lib.rs"; done < <(
    cargo metadata --quiet --format-version 1 --manifest-path "$work/deps/Cargo.toml" \
      | python3 -c 'import json,sys; [print(p["name"], p["manifest_path"]) for p in json.load(sys.stdin)["packages"]]')

  export RUSTC_BOOTSTRAP=1
  rc() { rustc --sysroot "$work/sysroot" --target $target --crate-type rlib -O --cap-lints allow "$@"; }
  # A crate of the library: retries after creating the documentation files its doc attributes
  # include (not part of the source pages).
  lib_crate() {
    local dir=$1; shift
    local log
    log="$(mktemp)"
    for _ in 1 2 3 4 5; do
      if (cd "$dir" && rc "$@" lib.rs) 2>"$log"; then rm -f "$log"; return; fi
      missing="$(grep -o "couldn't read \`[^\`]*\`" "$log" | sed "s/couldn't read \`//; s/\`//" | sort -u || true)"
      [ -n "$missing" ] || break
      while read -r f; do mkdir -p "$dir/$(dirname "$f")"; : > "$dir/$f"; done <<< "$missing"
    done
    cat "$log" >&2; exit 1
  }
  lib_crate "$src/core/src" --edition 2024 --crate-name core -o "$lib/libcore.rlib"
  lib_crate "$src/compiler_builtins" --edition 2024 --crate-name compiler_builtins -o "$lib/libcompiler_builtins.rlib"
  lib_crate "$src/alloc/src" --edition 2024 --crate-name alloc -o "$lib/liballoc.rlib"
  u=-Zforce-unstable-if-unmarked
  rc $u --edition 2018 --crate-name cfg_if -o "$lib/libcfg_if.rlib" "${dep[cfg-if]}"
  rc $u --edition 2021 --crate-name libc -o "$lib/liblibc.rlib" "${dep[libc]}"
  rc $u --edition 2015 --crate-name rustc_demangle -o "$lib/librustc_demangle.rlib" "${dep[rustc-demangle]}"
  rc $u --edition 2021 --crate-name hashbrown --cfg 'feature="nightly"' --cfg 'feature="rustc-internal-api"' \
    --cfg 'feature="rustc-dep-of-std"' --cfg 'feature="inline-more"' -o "$lib/libhashbrown.rlib" "${dep[hashbrown]}"
  lib_crate "$src/unwind" $u --edition 2021 --crate-name unwind -o "$lib/libunwind.rlib"
  lib_crate "$src/std_detect/src" $u --edition 2024 --crate-name std_detect --extern libc -o "$lib/libstd_detect.rlib"
  STD_ENV_ARCH=aarch64 lib_crate "$src/std/src" $u --edition 2024 --crate-name std --cfg backtrace_in_libstd \
    --extern alloc --extern hashbrown --extern std_detect --extern rustc_demangle --extern cfg_if \
    --extern libc --extern unwind -o "$lib/libstd.rlib"
  lib_crate "$src/panic_abort" $u --edition 2021 --crate-name panic_abort --extern libc -Cpanic=abort -o "$lib/libpanic_abort.rlib"
  rc $u --edition 2021 --crate-name getopts -o "$lib/libgetopts.rlib" "${dep[getopts]}"
  lib_crate "$src/test/src" $u --edition 2024 --crate-name test --extern core --extern std --extern libc \
    --extern getopts -o "$lib/libtest.rlib"
  echo "$stamp" > "$work/sysroot/.stamp"
fi

export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="$work/target"
export RUSTFLAGS="--sysroot $work/sysroot -Cpanic=abort -Zpanic-abort-tests -Clink-arg=-lgcc -Clink-arg=-lgcc_s"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu QEMU_CPU=max

cargo clippy --workspace --all-targets --target $target -- -D warnings
# The engine's unit tests (every kernel tier against the scalar reference: NEON here) and the
# tests that run whole models on those kernels: llama.cpp's reference logits, quantization
# fixtures, perplexity, context operations. The rest of the engine's tests cover code that is the
# same on every target, and the real models run too slowly under emulation. The pool's panic
# test needs unwinding, which this library does not have.
cargo test -p engine --target $target --lib --test logits_fixtures --test quant_fixtures \
  --test perplexity --test forward_memory --test context_ops "$@" \
  -- --skip a_panic_in_a_worker_reaches_the_caller
