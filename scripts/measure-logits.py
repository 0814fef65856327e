#!/usr/bin/env python3
"""Records llama.cpp's logits for our own tiny fixture models (engine/tests/data/logits/*.json).

Writes each model with `cargo run -p engine --example tiny_model`, evaluates the fixture prompt with
llama.cpp through llama-cpp-python (one decode of the whole prompt, logits at every position, flash
attention off, like ../shared/fixtures/tiny/), and saves the logits with the model's sha256 so the
tests can check that they regenerate the same file.

Usage: PYTHON_WITH_LLAMA_CPP scripts/measure-logits.py [NAME...]
(e.g. /work/venvs/llama/bin/python; llama-cpp-python builds llama.cpp from source, never vendored)
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "engine/tests/data/logits")

# name -> (model, n_ctx)
FIXTURES = {
    "tiny-qwen3-f16": ("tiny-qwen3-f16", 128),
    "tiny-gemma3-f16": ("tiny-gemma3-f16", 128),
    "tiny-phi3-f32": ("tiny-phi3-f32", 128),
    # Beyond the original context: LongRoPE's long factors.
    "tiny-phi3-f32-ctx2048": ("tiny-phi3-f32", 2048),
}


def measure(name, model, n_ctx, tmp):
    path = os.path.join(tmp, model + ".gguf")
    ids = subprocess.run(
        ["cargo", "run", "-q", "--release", "-p", "engine", "--example", "tiny_model", "--", model, path],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.strip()
    tokens = [int(t) for t in ids.split(",")]
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=128, n_ubatch=128, n_threads=2,
                          logits_all=True, flash_attn=False, verbose=False)
    llm.eval(tokens)
    logits = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    return {
        "format": "ollamars-logits-fixture/v1",
        "description": "llama.cpp's logits (llama-cpp-python %s, flash attention off, one decode of the "
                       "whole prompt) for a tiny random-weight model written by "
                       "engine/tests/models/tiny_model.rs" % llama_cpp.__version__,
        "model": model,
        "model_sha256": sha,
        "n_ctx": n_ctx,
        "tokens": tokens,
        "n_vocab": int(logits.shape[1]),
        "logits": [[float(v) for v in row] for row in logits],
    }


def main():
    names = sys.argv[1:] or list(FIXTURES)
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            model, n_ctx = FIXTURES[name]
            fx = measure(name, model, n_ctx, tmp)
            with open(os.path.join(OUT, name + ".json"), "w") as f:
                json.dump(fx, f)
                f.write("\n")
            print(name, "top-1 per position:", [int(np.argmax(r)) for r in fx["logits"]])


if __name__ == "__main__":
    main()
