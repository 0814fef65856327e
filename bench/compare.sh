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
#   THREADS=2 PP=512 TG=128 REPS=5   llama-bench's parameters (pp: one batch of PP tokens;
#                                     tg: TG tokens one at a time; REPS timed runs after a warm-up)
#   BENCH_DIR=target/bench            where the generated model files go (about 5 GB)
#   SKIP_1B=1                         only the two real models
# Output: one table row per file with tokens/s of both, the ratios, and tg as a share of the
# machine's streaming read bandwidth (tensor bytes one token reads, as `ollamars bench --json`
# reports them, x tokens/s / bandwidth).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-5}
BENCH_DIR=${BENCH_DIR:-$root/target/bench}
mkdir -p "$BENCH_DIR"

echo "== building (release)" >&2
cargo build --release -q -p ollamars
cargo build --release -q -p engine --example bench_model --example membw
bin=$root/target/release/ollamars

if [ -n "${LLAMA_VENV:-}" ]; then
    py=$LLAMA_VENV/bin/python
else
    venv=$(mktemp -d)/llama-venv
    trap 'rm -rf "$(dirname "$venv")"' EXIT
    echo "== installing llama-cpp-python into $venv (builds llama.cpp; takes a while)" >&2
    python3 -m venv "$venv"
    CMAKE_ARGS="-DGGML_NATIVE=ON" "$venv/bin/pip" install -q llama-cpp-python
    py=$venv/bin/python
fi
"$py" -c 'import llama_cpp' || { echo "no llama_cpp in $py" >&2; exit 1; }

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files+=("$(scripts/fetch-model.sh gemma3-270m)" "$(scripts/fetch-model.sh qwen25-coder-0.5b)")
    if [ -z "${SKIP_1B:-}" ]; then
        f16=$BENCH_DIR/tinyllama-1.1b-random-f16.gguf
        [ -f "$f16" ] || target/release/examples/bench_model "$f16" >/dev/null
        for q in q4_0 q4_K_M q6_K q8_0; do
            out=$BENCH_DIR/tinyllama-1.1b-random-$q.gguf
            [ -f "$out" ] || "$bin" quantize "$f16" "$out" "$q" >/dev/null
            files+=("$out")
        done
    fi
fi

echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(uptime | sed 's/.*load average: //')" >&2

# The streaming read bandwidth is measured right before and right after each file's runs (a few
# seconds each: the best of 10 passes over 1 GiB on THREADS threads with the widest loads the CPU
# has), so each tg is set against the machine's state of the same minute. On a shared VM the
# probe can jump between two levels from one minute to the next (the two vCPUs' placement on the
# host, as far as we can tell): tg is given against both readings, and when they disagree the
# row cannot be read more precisely than that range.
results=$(mktemp)
for f in "${files[@]}"; do
    bw=$(target/release/examples/membw "$THREADS" 1024 10)
    echo "== $(basename "$f") (streaming read $bw GB/s)" >&2
    ours=$("$bin" bench -m "$f" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS" --json)
    theirs=$("$py" "$root/bench/llama_bench.py" "$f" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS")
    bw_after=$(target/release/examples/membw "$THREADS" 1024 10)
    size=$(stat -c %s "$f")
    echo "$(basename "$f") $size $bw $bw_after $ours $theirs" | tee -a "$results" >&2
done
echo "== load after: $(uptime | sed 's/.*load average: //')" >&2

python3 - "$results" "$PP" "$TG" "$THREADS" <<'PY'
import json, sys
path, pp, tg, threads = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
dec = json.JSONDecoder()
print(f"| model file | pp{pp} ours | pp{pp} llama.cpp | pp ratio | tg{tg} ours | tg{tg} llama.cpp | tg ratio | read GB/s before / after | tg ours % of read | tg llama.cpp % |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for line in open(path):
    name, size, bw0, bw1, rest = line.split(" ", 4)
    bws = sorted([float(bw0), float(bw1)], reverse=True)
    ours, i = dec.raw_decode(rest.strip())
    theirs, _ = dec.raw_decode(rest.strip()[i:].strip())
    # Bytes one token reads (every tensor but the embedding table's unused rows), as ours reports
    # them; the same file, so the same bytes for llama.cpp.
    gb = ours.get("read_bytes", int(size)) / 1e9
    r = lambda a, b: f"{a / b:.2f}x" if b else "-"
    # Against the higher reading first: "88-93%" is 88% of the higher, 93% of the lower.
    share = lambda tps: "-".join(dict.fromkeys(f"{100 * tps * gb / bw:.0f}" for bw in bws)) + "%"
    print(f"| {name} | {ours['pp_tps']:.1f} ± {ours['pp_std']:.1f} | {theirs['pp_tps']:.1f} ± {theirs['pp_std']:.1f} | "
          f"{r(ours['pp_tps'], theirs['pp_tps'])} | {ours['tg_tps']:.2f} ± {ours['tg_std']:.2f} | "
          f"{theirs['tg_tps']:.2f} ± {theirs['tg_std']:.2f} | {r(ours['tg_tps'], theirs['tg_tps'])} | "
          f"{float(bw0):.1f} / {float(bw1):.1f} | {share(ours['tg_tps'])} | {share(theirs['tg_tps'])} |")
print(f"\n{threads} threads; tokens/s, mean ± stddev; read GB/s: engine/examples/membw just before and just after the file's runs; % of read against the higher, then the lower reading.")
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
