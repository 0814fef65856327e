#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for a bounded time each, one after the other at low
# priority with one job (fuzz/run.sh), and prints a table: target, seconds, executions, new
# artifacts (crash-, timeout-, oom- inputs in fuzz/artifacts/TARGET/; a target stops at its first
# crash) and corpus size. Not part of the test run: a manual or nightly job.
#
# Usage: fuzz/run-all.sh SECONDS [TARGET...]
# Logs: fuzz/logs/TARGET.log. CARGO_TARGET_DIR, if set, is the build directory (cargo fuzz leaves it
# to cargo for both build and run, so a warm one from another checkout is reused). Needs a
# nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -uo pipefail
cd "$(dirname "$0")"
seconds="${1:?usage: fuzz/run-all.sh SECONDS [TARGET...]}"
shift
if [ $# -gt 0 ]; then targets=("$@"); else mapfile -t targets < <(cargo +nightly fuzz list); fi
nice -n 10 cargo +nightly fuzz build >/dev/null || exit 1
mkdir -p logs
printf '%-18s %6s %12s %9s %7s\n' target secs execs artifacts corpus
for t in "${targets[@]}"; do
  before=$(ls "artifacts/$t" 2>/dev/null | wc -l)
  ./run.sh "$t" "$seconds" -timeout=10 >"logs/$t.log" 2>&1
  execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "logs/$t.log" | grep -oE '[0-9]+$')
  after=$(ls "artifacts/$t" 2>/dev/null | wc -l)
  printf '%-18s %6s %12s %9s %7s\n' "$t" "$seconds" "${execs:-?}" "$((after - before))" "$(ls "corpus/$t" | wc -l)"
done
