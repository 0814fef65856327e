#!/usr/bin/env bash
# ollamars against llama.cpp on the same GGUF files, same machine, same thread count, one run.
#
#   bench/compare.sh [FILE.gguf ...]
#
# Without arguments it measures the two small real models (fetched by scripts/fetch-model.sh)
# and a TinyLlama-1.1B-shaped random-weight llama model in Q4_0, Q4_K_M, Q6_K and Q8_0, written by
# our GGUF writer (engine example bench_model) and quantizer (ollamars quantize).
#
# llama.cpp comes from llama-cpp-python, installed from PyPI into a throwaway virtualenv (it builds
# llama.cpp from source with this CPU's features: 10+ minutes on 2 cores). Set LLAMA_VENV to an
# existing virtualenv that has it to skip that. Other settings (environment):
#   THREADS=2 PP=512 TG=128 REPS=3   llama-bench's parameters (pp: one batch of PP tokens;
#                                     tg: TG tokens one at a time; REPS timed runs after a warm-up)
#   DEPTH=0                           tokens in the context before each test (llama-bench's -d)
#   ROUNDS=3                          runs of each engine per file, alternated (A B B A ...)
#   BENCH_DIR=target/bench            where the generated model files go (about 5 GB)
#   SKIP_1B=1                         only the two real models
#   AVX2=1                            both engines held to AVX2 + FMA (what an AVX2-only CPU
#                                     runs): ours with OLLAMARS_ISA=avx2, llama.cpp built with
#                                     GGML_NATIVE=OFF, AVX2/FMA/F16C on and AVX-512 off (with
#                                     LLAMA_VENV, a virtualenv built that way)
# Output: one table row per file with tokens/s of both (the median of the rounds and their
# range), the ratios of the medians, and tg as a share of the machine's streaming read bandwidth
# (tensor bytes one token reads, as `ollamars bench --json` reports them, x tokens/s / bandwidth).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-3}
DEPTH=${DEPTH:-0}
ROUNDS=${ROUNDS:-3}
BENCH_DIR=${BENCH_DIR:-$root/target/bench}
mkdir -p "$BENCH_DIR"
llama_cmake="-DGGML_NATIVE=ON"
# On a CPU with AMX the native build compiles ggml's AMX backend, and llama-cpp-python 0.3.36's
# llama_decode crashes (SIGSEGV) there on the first batch of the 1.1B files (Xeon VM, 2026-12-04):
# build it without AMX, keeping everything else the native build has (AVX-512, VNNI, REPACK).
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null; then
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    llama_cmake+=" '-DCMAKE_C_FLAGS=$no_amx' '-DCMAKE_CXX_FLAGS=$no_amx'"
fi
if [ -n "${AVX2:-}" ]; then
    export OLLAMARS_ISA=avx2
    llama_cmake="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF"
fi

echo "== building (release)" >&2
cargo build --release -q -p ollamars
cargo build --release -q -p engine --example bench_model --example membw
# What cargo just built: CARGO_TARGET_DIR when set (a run used to time an older binary from
# target/ while a fresh one sat in CARGO_TARGET_DIR).
release=${CARGO_TARGET_DIR:-$root/target}/release
bin=$release/ollamars

if [ -n "${LLAMA_VENV:-}" ]; then
    py=$LLAMA_VENV/bin/python
else
    venv=$(mktemp -d)/llama-venv
    trap 'rm -rf "$(dirname "$venv")"' EXIT
    echo "== installing llama-cpp-python into $venv (builds llama.cpp; takes a while)" >&2
    python3 -m venv "$venv"
    # No wheel cache: pip would reuse a llama.cpp built earlier with other flags (AVX2=1 after a
    # native run gave the native build).
    CMAKE_ARGS="$llama_cmake" "$venv/bin/pip" install -q --no-cache-dir llama-cpp-python
    py=$venv/bin/python
fi
"$py" -c 'import llama_cpp' || { echo "no llama_cpp in $py" >&2; exit 1; }

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files+=("$(scripts/fetch-model.sh gemma3-270m)" "$(scripts/fetch-model.sh qwen25-coder-0.5b)")
    if [ -z "${SKIP_1B:-}" ]; then
        f16=$BENCH_DIR/tinyllama-1.1b-random-f16.gguf
        [ -f "$f16" ] || "$release/examples/bench_model" "$f16" >/dev/null
        for q in q4_0 q4_K_M q6_K q8_0; do
            out=$BENCH_DIR/tinyllama-1.1b-random-$q.gguf
            [ -f "$out" ] || "$bin" quantize "$f16" "$out" "$q" >/dev/null
            files+=("$out")
        done
    fi
fi

echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(uptime | sed 's/.*load average: //')" >&2

# The machine is shared: its memory bandwidth and its CPUs' speed move from one minute to the
# next (the streaming-read probe below jumps between ~35 and ~60 GB/s within seconds on the
# 2-vCPU VMs). So each file gets ROUNDS rounds of one run of each engine, in alternating order
# (ours first in odd rounds, llama.cpp first in even ones), and the table quotes medians: a
# change of the machine's state hits both engines alike instead of deciding the ratio. The
# streaming read bandwidth (`membw`: the best of 5 passes over 1 GiB on THREADS threads with the
# widest loads the CPU has) is read before the first run and after every run, so each tg run is
# set against the readings on either side of it.
results=$(mktemp)
probe() { echo "P $(basename "$1") $("$release/examples/membw" "$THREADS" 1024 5)" >>"$results"; }
run() {
    local who=$1 f=$2 out
    if [ "$who" = O ]; then
        out=$("$bin" bench -m "$f" -p "$PP" -n "$TG" -d "$DEPTH" -t "$THREADS" -r "$REPS" --json)
    else
        out=$("$py" "$root/bench/llama_bench.py" "$f" -p "$PP" -n "$TG" -d "$DEPTH" -t "$THREADS" -r "$REPS")
    fi
    echo "$who $(basename "$f") $out" >>"$results"
    probe "$f"
}
for f in "${files[@]}"; do
    echo "== $(basename "$f") ($(stat -c %s "$f") bytes)" >&2
    probe "$f"
    for r in $(seq "$ROUNDS"); do
        if [ $((r % 2)) -eq 1 ]; then run O "$f"; run T "$f"; else run T "$f"; run O "$f"; fi
    done
    grep " $(basename "$f") " "$results" | tail -n $((4 * ROUNDS)) >&2
done
echo "== load after: $(uptime | sed 's/.*load average: //')" >&2

python3 - "$results" "$PP" "$TG" "$THREADS" "$ROUNDS" "$DEPTH" <<'PY'
import json, os, statistics, sys
path, pp, tg, threads, rounds, depth = sys.argv[1:7]
# llama-bench's test names: "pp512", "tg128 @ d4096".
at = f" @ d{depth}" if int(depth) else ""
# Per file, in order: probe readings ("P") and runs of ours ("O") and llama.cpp ("T").
files = {}
for line in open(path):
    kind, name, rest = line.split(" ", 2)
    files.setdefault(name, []).append((kind, float(rest) if kind == "P" else json.loads(rest)))
print(f"| model file | pp{pp}{at} ours | pp{pp}{at} llama.cpp | pp ratio | tg{tg}{at} ours | tg{tg}{at} llama.cpp | tg ratio | read GB/s | tg ours % of read | tg llama.cpp % |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
med = statistics.median
for name, ev in files.items():
    probes = [v for k, v in ev if k == "P"]
    # Bytes one token reads (every tensor but the embedding table's unused rows), as ours reports
    # them; the same file, so the same bytes for llama.cpp.
    gb = next(v["read_bytes"] for k, v in ev if k == "O") / 1e9
    cols = {}
    for who in "OT":
        runs = [(i, v) for i, (k, v) in enumerate(ev) if k == who]
        pps = [v["pp_tps"] for _, v in runs]
        tgs = [v["tg_tps"] for _, v in runs]
        # A run against the readings just before and just after it: when they disagree, the
        # share is a range (against the higher, then the lower).
        hi = [100 * v["tg_tps"] * gb / max(ev[i - 1][1], ev[i + 1][1]) for i, v in runs]
        lo = [100 * v["tg_tps"] * gb / min(ev[i - 1][1], ev[i + 1][1]) for i, v in runs]
        cols[who] = (pps, tgs, f"{med(hi):.0f}-{med(lo):.0f}%")
    span = lambda xs, p: f"{med(xs):.{p}f} ({min(xs):.{p}f}-{max(xs):.{p}f})"
    r = lambda a, b: f"{med(a) / med(b):.2f}x" if med(b) else "-"
    (opp, otg, osh), (tpp, ttg, tsh) = cols["O"], cols["T"]
    print(f"| {name} | {span(opp, 1)} | {span(tpp, 1)} | {r(opp, tpp)} | {span(otg, 2)} | {span(ttg, 2)} | "
          f"{r(otg, ttg)} | {min(probes):.1f}-{max(probes):.1f} | {osh} | {tsh} |")
print(f"\n{threads} threads{', both held to AVX2 (AVX2=1)' if os.environ.get('AVX2') else ''}; tokens/s: median of {rounds} alternated rounds (min-max), each round the mean of "
      f"the engine's timed runs; read GB/s: engine/examples/membw before the first run and after each run "
      f"(min-max); % of read: median over the runs of tg against the higher, then the lower reading next to the run.")
PY
rm -f "$results"

# Time to first token (from the start of the command, model load included, warm page cache; three
# runs, as it moves with what ran just before) and peak RSS against the file and KV cache sizes,
# for the first file.
echo >&2 "== first token and memory: $(basename "${files[0]}")"
for _ in 1 2 3; do
    "$bin" bench -m "${files[0]}" -p 0 -n 1 -t "$THREADS" -r 1 | grep -E "first token"
done
"$bin" bench -m "${files[0]}" -p "$PP" -n "$TG" -t "$THREADS" -r 1 | grep -E "memory"
