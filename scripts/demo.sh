#!/usr/bin/env bash
# The main job on a fresh machine: build ollamars, fetch the small real model, and run it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin ollamars
model="$(scripts/fetch-model.sh gemma3-270m)"
target/release/ollamars inspect "$model"
