#!/usr/bin/env python3
"""Records llama.cpp's answers on the two small real models (engine/tests/data/real/*.json).

For each model: its perplexity on engine/tests/data/text/lighthouses.txt (llama-perplexity's method,
n_ctx 256), and greedy continuations of a few prompts (prompt tokens, the first 32 generated tokens,
the top-1/top-2 logit margin at each step, the text). Measured through llama-cpp-python, which builds
llama.cpp from source (never vendored); flash attention off, 2 threads.

Usage: PYTHON_WITH_LLAMA_CPP scripts/measure-real-models.py   (e.g. /work/venvs/llama/bin/python)
"""
import ctypes
import hashlib
import json
import os
import subprocess

import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "engine/tests/data/real")
TEXT = "engine/tests/data/text/lighthouses.txt"
N_CTX_PPL = 256
N_GEN = 32

MODELS = {
    "gemma3-270m": [
        ("The capital of France is", False),
        ("Once upon a time, in a small village by the sea,", False),
        ("The three primary colors are", False),
    ],
    "qwen25-coder-0.5b": [
        ("def fibonacci(n):", False),
        ("<|im_start|>user\nWrite a Python function that reverses a string.<|im_end|>\n"
         "<|im_start|>assistant\n", True),
        ("The quick brown fox", False),
    ],
}


def model_path(name):
    return subprocess.run([os.path.join(ROOT, "scripts/fetch-model.sh"), name], check=True,
                          capture_output=True, text=True).stdout.strip()


def last_logits(llm):
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def greedy(path, prompt, parse_special):
    llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=2, flash_attn=False,
                          verbose=False)
    tokens = llm.tokenize(prompt.encode(), add_bos=True, special=parse_special)
    llm.eval(tokens)
    out, margins = [], []
    for _ in range(N_GEN):
        logits = last_logits(llm)
        order = np.argsort(-logits)
        t = int(order[0])
        out.append(t)
        margins.append(float(logits[order[0]] - logits[order[1]]))
        if llm.token_eos() == t or llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm.model), t):
            break
        llm.eval([t])
    text = llm.detokenize(out).decode("utf-8", errors="replace")
    return {"prompt": prompt, "parse_special": parse_special, "prompt_tokens": tokens, "tokens": out,
            "margins": margins, "text": text}


def perplexity(path):
    text = open(os.path.join(ROOT, TEXT), encoding="utf-8").read()
    llm = llama_cpp.Llama(model_path=path, n_ctx=N_CTX_PPL, n_batch=N_CTX_PPL, n_threads=2, logits_all=True,
                          flash_attn=False, verbose=False)
    # llama-perplexity: common_tokenize(text, add_special = true), special tokens not parsed.
    tokens = llm.tokenize(text.encode(), add_bos=True, special=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = llama_cpp.llama_vocab_get_add_bos(vocab)
    n_ctx, first = N_CTX_PPL, N_CTX_PPL // 2
    nll = nll2 = 0.0
    count = chunks = 0
    for c in range(len(tokens) // n_ctx):
        chunk = list(tokens[c * n_ctx:(c + 1) * n_ctx])
        if add_bos:
            chunk[0] = llm.token_bos()
        llm.reset()
        llm.eval(chunk)
        for i in range(first, n_ctx - 1):
            logits = np.asarray(llm.scores[i], dtype=np.float32)
            m = logits.max()
            lp = float(logits[chunk[i + 1]] - m) - float(np.log(np.sum(np.exp(logits - m), dtype=np.float64)))
            nll -= lp
            nll2 += lp * lp
            count += 1
        chunks += 1
    mean = nll / count
    ppl = float(np.exp(mean))
    err = float(np.sqrt((nll2 / count - mean * mean) / (count - 1)) * ppl)
    return {"file": TEXT, "n_ctx": n_ctx, "n_tokens": len(tokens), "chunks": chunks, "scored": count,
            "ppl": ppl, "ppl_error": err}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, prompts in MODELS.items():
        path = model_path(name)
        result = {
            "format": "ollamars-real-model-reference/v1",
            "description": "llama.cpp's answers (llama-cpp-python %s, flash attention off, 2 threads), "
                           "recorded by scripts/measure-real-models.py" % llama_cpp.__version__,
            "model": name,
            "model_sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
            "perplexity": perplexity(path),
            "greedy": [greedy(path, p, s) for p, s in prompts],
        }
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump(result, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(name, "ppl", result["perplexity"])
        for g in result["greedy"]:
            print("  ", repr(g["prompt"]), "->", repr(g["text"]))


if __name__ == "__main__":
    main()
