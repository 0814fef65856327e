#!/usr/bin/env bash
# Runs a fuzz target for a bounded time at low priority, seeding its corpus first if needed.
# Crashing inputs land in fuzz/artifacts/TARGET/; keep each as a regression test (its bytes in a
# test of the owning crate, e.g. engine/tests/gguf_hostile.rs) before fixing it.
# fuzz/run-all.sh runs every target in turn and prints executions and crashes per target.
#
# Usage: fuzz/run.sh TARGET SECONDS [extra libFuzzer flags]
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "$0")"
target="${1:?usage: fuzz/run.sh TARGET SECONDS}"
seconds="${2:?usage: fuzz/run.sh TARGET SECONDS}"
shift 2
[ -d "corpus/$target" ] || ./seed.sh "$target"
# -max_len: big enough for the small seeds whole and the fixtures' headers in part, small enough
# to keep executions fast. -rss_limit_mb / -malloc_limit_mb: a parse that allocates more than
# this is a bug (the reader caps a header's memory at 256 MiB).
exec nice -n 10 cargo +nightly fuzz run "$target" "corpus/$target" -- \
  -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=1024 -malloc_limit_mb=512 \
  -print_final_stats=1 "$@"
