#!/usr/bin/env bash
# The main job on a fresh machine: build ollamars, fetch the small real model (Gemma 3 270M),
# start the daemon on a temporary store, create a model from the file, answer a prompt with it,
# and stop the daemon.
#
# Usage: scripts/demo.sh [PROMPT]
# The daemon listens on OLLAMARS_HOST if set, else on a free loopback port.
set -euo pipefail
cd "$(dirname "$0")/.."

prompt="${1:-Why is the sky blue? Answer in two sentences.}"

cargo build --release --bin ollamars
ollamars="${CARGO_TARGET_DIR:-$PWD/target}/release/ollamars"
model_file="$(scripts/fetch-model.sh gemma3-270m)"

work="$(mktemp -d)"
serve_pid=""
cleanup() {
  if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then
    kill -TERM "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${OLLAMARS_HOST:-}" ]; then
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  export OLLAMARS_HOST="127.0.0.1:$port"
fi
export OLLAMARS_MODELS="$work/models"

echo "starting the daemon at $OLLAMARS_HOST (models in a temporary store)" >&2
"$ollamars" serve >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 300); do
  if "$ollamars" list >/dev/null 2>&1; then break; fi
  if ! kill -0 "$serve_pid" 2>/dev/null; then
    echo "the daemon exited:" >&2
    cat "$work/serve.log" >&2
    exit 1
  fi
  sleep 0.1
done

# Gemma 3 270M is small: a bounded, greedy answer keeps the demo short and repeatable.
printf 'FROM %s\nPARAMETER temperature 0\nPARAMETER num_predict 64\n' "$model_file" >"$work/Modelfile"
"$ollamars" create gemma3-270m -f "$work/Modelfile"
"$ollamars" list
echo ">>> $prompt" >&2
"$ollamars" run --verbose gemma3-270m "$prompt"
