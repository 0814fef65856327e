#!/usr/bin/env bash
# Runs the x86-64 release binary on older CPUs that qemu-user emulates, to show that a binary
# built on one x86-64 machine runs correctly on any: every instruction past baseline x86-64 sits
# behind the runtime feature check that picks the kernels' tier (engine/src/kernels/mod.rs).
#
#     scripts/x86-cpus-test.sh [path/to/ollamars]
#
# For each CPU it checks the tier the binary picks there (`ollamars bench` prints it), and for
# the two tiers qemu can run (scalar, avx2: TCG has no AVX-512) that the fixtures' perplexities,
# in prompt batches and one token at a time, are bit for bit those of the same tier forced with
# OLLAMARS_ISA on this machine. The engine's tests compare each tier with the scalar reference;
# this compares the whole binary on a CPU that lacks the higher tiers' instructions.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-${CARGO_TARGET_DIR:-$PWD/target}/release/ollamars}"
fixtures="$PWD/../shared/fixtures/tiny"
text="$PWD/engine/tests/data/text/lighthouses.txt"
[ -x "$bin" ] || { echo "x86-cpus-test: no binary at $bin (cargo build --release first)" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || { echo "x86-cpus-test: not an x86-64 machine" >&2; exit 1; }

if ! command -v qemu-x86_64 >/dev/null; then
  echo "installing qemu-user..." >&2
  scripts/apt-install.sh qemu-user
fi

failed=0
fail() { echo "x86-cpus-test: FAILED: $*" >&2; failed=1; }

# The tier `ollamars bench` reports ("..., kernels avx2, ...") on the emulated CPU; nothing if
# it stopped (an instruction the CPU lacks is SIGILL). qemu's warnings about host-only CPUID
# bits it cannot emulate go to stderr with the rest.
tier_on() {
  qemu-x86_64 -cpu "$1" "$bin" bench -m "$fixtures/tiny-llama-spm-e64-q4_0.gguf" -p 8 -n 4 -r 1 -t 2 2>/dev/null \
    | sed -n 's/.*, kernels \([a-z0-9]*\),.*/\1/p'
}

# CPU model, the tier expected there: x86-64's baseline (SSE2), AVX without AVX2, AVX2 and FMA
# without F16C (the avx2 tier needs all three), and AVX2 with FMA and F16C.
for spec in "qemu64 scalar" "SandyBridge scalar" "Haswell-noTSX,-f16c scalar" "Haswell-noTSX avx2"; do
  read -r cpu want <<<"$spec"
  got="$(tier_on "$cpu")" || true
  [ "$got" = "$want" ] || fail "-cpu $cpu picked tier '${got:-none (did it run?)}', expected $want"
done

# The same perplexity, to the last bit, as the tier forced here. -b 64: the prompt-batch
# kernels; -b 1: decode's kernels, one token per forward pass.
pairs=("qemu64 scalar")
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo; then
  pairs+=("Haswell-noTSX avx2")
else
  echo "x86-cpus-test: this CPU has no avx2 tier to compare -cpu Haswell with" >&2
fi
for pair in "${pairs[@]}"; do
  read -r cpu isa <<<"$pair"
  for model in tiny-llama-spm-e64-q4_0 tiny-llama-spm-e64-q8_0 tiny-llama-spm-e256-q4_k_m tiny-llama-spm-e256-tied-q6_k; do
    runs=("-c 128 -b 64")
    case $model in *e256*) runs+=("-c 64 -b 1") ;; esac
    for args in "${runs[@]}"; do
      # shellcheck disable=SC2086 # $args is several words on purpose
      here="$(OLLAMARS_ISA=$isa "$bin" perplexity -m "$fixtures/$model.gguf" -f "$text" $args -t 2 --json 2>/dev/null)" || true
      # shellcheck disable=SC2086
      there="$(qemu-x86_64 -cpu "$cpu" "$bin" perplexity -m "$fixtures/$model.gguf" -f "$text" $args -t 2 --json 2>/dev/null)" || true
      if [ -z "$here" ] || [ "$here" != "$there" ]; then
        fail "$model ($args): OLLAMARS_ISA=$isa here gave '$here', -cpu $cpu gave '$there'"
      else
        echo "x86-cpus-test: $model ($args) on -cpu $cpu = $isa here: $here"
      fi
    done
  done
done

[ "$failed" -eq 0 ] || exit 1
echo "x86-cpus-test: ok"
