#!/usr/bin/env bash
# Pull throughput from a loopback registry: ollamars' pull against curl fetching the same blob.
#
# Starts Debian's docker-registry (distribution 2.8) on 127.0.0.1, pushes a model whose layer is
# SIZE_MB of random bytes, then alternates RUNS times between
#   curl   GET of the blob to a file (what a plain HTTP client gets from this registry), and
#   pull   `transfer pull` into an empty store: manifest, parallel ranged GETs, sha256 verified,
#          fsync, rename (everything a real pull does),
# and prints each run and the best of each in MB/s (1 MB = 10^6 bytes). Not a test: run it by hand
# on an idle machine, e.g. `SIZE_MB=1024 RUNS=3 bench/pull-throughput.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB="${SIZE_MB:-1024}"
RUNS="${RUNS:-3}"
CONNECTIONS="${CONNECTIONS:-}"

command -v docker-registry >/dev/null || { echo "docker-registry is not installed (apt-get install docker-registry)" >&2; exit 1; }
cargo build --release -q -p registry --example transfer
bin="$PWD/target/release/examples/transfer"

work="$(mktemp -d "${TMPDIR:-/tmp}/ollamars-bench.XXXXXX")"
reg_pid=""
cleanup() { [ -n "$reg_pid" ] && kill "$reg_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat > "$work/config.yml" <<YML
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $work/registry
http:
  addr: 127.0.0.1:$port
YML
docker-registry serve "$work/config.yml" >"$work/registry.log" 2>&1 &
reg_pid=$!
for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

name="127.0.0.1:$port/bench/blob:1"
head -c "${SIZE_MB}M" /dev/urandom > "$work/blob"
digest="$("$bin" import --models "$work/src" "$name" "$work/blob" 2>/dev/null)"
rm -f "$work/blob"
"$bin" push --models "$work/src" --insecure "$name" 2>&1 | sed 's/^/setup: /'
rm -rf "$work/src"
bytes=$((SIZE_MB * 1024 * 1024))
url="http://127.0.0.1:$port/v2/bench/blob/blobs/$digest"
extra=()
[ -n "$CONNECTIONS" ] && extra=(--connections "$CONNECTIONS")

now() { date +%s.%N; }
mbps() { python3 -c "print(f'{$bytes / ($2 - $1) / 1e6:.0f}')"; }
curls=(); pulls=()
for run in $(seq "$RUNS"); do
  sync
  t0=$(now); curl -sf -o "$work/curl.out" "$url"; t1=$(now)
  c=$(mbps "$t0" "$t1"); rm -f "$work/curl.out"
  sync
  t0=$(now); "$bin" pull --models "$work/dst" --insecure "${extra[@]}" "$name" 2>/dev/null; t1=$(now)
  p=$(mbps "$t0" "$t1"); rm -rf "$work/dst"
  echo "run $run: curl $c MB/s, ollamars pull $p MB/s"
  curls+=("$c"); pulls+=("$p")
done
python3 - "${SIZE_MB}" "${curls[*]}" "${pulls[*]}" <<'PY'
import statistics, sys
size, c, p = sys.argv[1], [int(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()]
for what, f in (("best", max), ("median", statistics.median)):
    print(f"{what} of {len(c)}, {size} MiB blob: curl {f(c):.0f} MB/s, ollamars pull {f(p):.0f} MB/s ({100 * f(p) / f(c):.0f}% of curl)")
PY
