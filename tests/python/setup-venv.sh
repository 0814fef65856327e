#!/usr/bin/env bash
# Makes the virtualenv with the official `ollama`, `openai` and `anthropic` Python clients (from
# PyPI) that the end-to-end client tests run against a live daemon, and prints its path. Idempotent and cached
# outside the repo (OLLAMARS_TEST_VENV, default ~/.cache/ollamars-test-venv): a second run only
# checks that the pinned versions import.
set -euo pipefail

VENV="${OLLAMARS_TEST_VENV:-$HOME/.cache/ollamars-test-venv}"
# Pinned so a client release cannot change the suite's result between two runs.
PACKAGES=(ollama==0.6.3 openai==3.57.0 anthropic==2.17.0)

check() {
  "$VENV/bin/python" - "${PACKAGES[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    if version(name) != want:
        sys.exit(1)
import anthropic, ollama, openai  # noqa: F401
PY
}

if ! check; then
  if [ ! -x "$VENV/bin/python" ]; then
    if ! python3 -m venv "$VENV" >&2 2>/dev/null; then
      # Debian's python3 needs python3-venv for `-m venv` (ensurepip).
      rm -rf "$VENV"
      "$(dirname "$0")/../../scripts/apt-install.sh" python3-venv
      python3 -m venv "$VENV" >&2
    fi
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PACKAGES[@]}" >&2
  check || { echo "the client virtualenv at $VENV does not import ${PACKAGES[*]}" >&2; exit 1; }
fi
echo "$VENV"
