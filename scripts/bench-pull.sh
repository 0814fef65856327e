#!/usr/bin/env bash
# Pull throughput of a 1 GiB blob from a loopback docker-registry: `ollamars`'s pull against
# `curl` from the same registry, alternating, medians of 5 runs (registry/tests/it/throughput.rs).
# Needs docker-registry and curl (scripts/test.sh installs the registry) and ~3 GiB of /dev/shm.
#
# Usage: scripts/bench-pull.sh [MiB] [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
export BENCH_PULL_MIB="${1:-1024}" BENCH_PULL_RUNS="${2:-5}"
exec cargo test --release -p registry --test it throughput::pull_throughput_vs_curl -- --ignored --nocapture --exact
