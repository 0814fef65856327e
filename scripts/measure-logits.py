#!/usr/bin/env python3
"""Records llama.cpp's logits and perplexity for our own tiny fixtures (engine/tests/data/logits/).

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


def llama_cpp_perplexity(llm, tokens, n_ctx):
    """llama-perplexity's method (tools/perplexity/perplexity.cpp), one sequence per chunk."""
    add_bos = llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model))
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    for c in range(len(tokens) // n_ctx):
        chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        if add_bos:
            chunk[0] = llm.token_bos()
        llm.reset()
        llm.eval(chunk)
        for i in range(first, n_ctx - 1):
            logits = np.asarray(llm.scores[i], dtype=np.float32)
            m = logits.max()
            lp = float(logits[chunk[i + 1]] - m) - np.log(np.sum(np.exp((logits - m).astype(np.float64))))
            nll -= lp
            nll2 += lp * lp
            count += 1
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = float(np.exp(mean))
    return ppl, float(np.sqrt(var / (count - 1)) * ppl), count


# name -> (model file or tiny model, n_ctx, n_tokens)
PPL_FIXTURES = {
    "ppl-tiny-llama-f16": ("shared:tiny/tiny-llama-spm-e64-f16.gguf", 16, 100),
    "ppl-tiny-gemma3-f16": ("tiny-gemma3-f16", 16, 100),
}


def measure_ppl(name, model, n_ctx, n_tokens, tmp):
    if model.startswith("shared:"):
        path = os.path.join(ROOT, "../shared/fixtures", model[len("shared:"):])
    else:
        path = os.path.join(tmp, model + ".gguf")
        subprocess.run(["cargo", "run", "-q", "--release", "-p", "engine", "--example", "tiny_model", "--", model, path],
                       cwd=ROOT, check=True, capture_output=True)
    llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, n_threads=2, logits_all=True,
                          flash_attn=False, verbose=False)
    # A fixed pseudo-random token stream (an LCG), ids 3..n_vocab-1.
    x, tokens = 12345, []
    for _ in range(n_tokens):
        x = (x * 1103515245 + 12345) % (1 << 31)
        tokens.append(3 + x % (llm.n_vocab() - 3))
    ppl, err, count = llama_cpp_perplexity(llm, tokens, n_ctx)
    return {
        "format": "ollamars-perplexity-fixture/v1",
        "description": "llama.cpp's perplexity (llama-perplexity's method through llama-cpp-python %s, "
                       "flash attention off) of a fixed token stream" % llama_cpp.__version__,
        "model": model,
        "model_sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
        "n_ctx": n_ctx,
        "tokens": tokens,
        "ppl": ppl,
        "ppl_error": err,
        "scored": count,
    }


def main():
    args = sys.argv[1:]
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in [a for a in args if a in PPL_FIXTURES] or ([] if args else list(PPL_FIXTURES)):
            fx = measure_ppl(name, *PPL_FIXTURES[name], tmp)
            with open(os.path.join(OUT, name + ".json"), "w") as f:
                json.dump(fx, f)
                f.write("\n")
            print(name, "ppl", fx["ppl"], "+/-", fx["ppl_error"])
    names = [a for a in args if a in FIXTURES] or ([] if args else list(FIXTURES))
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
