#!/usr/bin/env bash
# Pull throughput of a 1 GiB blob from a loopback docker-registry: `ollamars`'s pull against
# `curl` from the same registry, alternating, medians of 5 runs (registry/tests/it/throughput.rs).
# Everything (the registry's storage, curl's output, our store) is on /dev/shm. Prints each run,
# then `medians: curl X MiB/s, ollamars pull Y MiB/s, ratio Z` and the CPU seconds per GiB of
# each client and of the registry; fails if the ratio is under 0.90 (issue 6).
# Needs docker-registry and curl (scripts/test.sh installs the registry) and ~3 GiB of /dev/shm.
#
# Usage: scripts/bench-pull.sh [MiB] [runs]   (BENCH_PULL_CONNECTIONS=N caps the connections)
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in docker-registry curl; do
    command -v "$tool" >/dev/null || { echo "bench-pull: $tool is not installed" >&2; exit 1; }
done
export BENCH_PULL_MIB="${1:-1024}" BENCH_PULL_RUNS="${2:-5}"
cargo build --release -p registry --tests --quiet
echo "load before: $(uptime)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
cargo test --release --quiet -p registry --test it throughput::pull_throughput_vs_curl \
    -- --ignored --nocapture --exact >"$out" 2>&1 || status=$?
grep -E '^(run [0-9]|[0-9]+ MiB blob|median|pull reached)' "$out" || cat "$out"
echo "load after:  $(uptime)"
exit "$status"
