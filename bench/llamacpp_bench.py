#!/usr/bin/env python3
"""llama-bench's protocol through llama-cpp-python's low-level API.

pp: one batch of P random tokens (logits for the last one only); tg: N tokens one at a time with
random ids. A warm-up run of each first, the KV cache cleared before every repetition, tokens/s per
repetition, mean and sample standard deviation over R repetitions. Prints one JSON object:
{"pp_tps":..,"pp_std":..,"tg_tps":..,"tg_std":..}, the format `ollamars bench --json` prints.
"""
import argparse
import ctypes
import json
import random
import statistics
import sys
import time

import llama_cpp as L


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5)
    args = ap.parse_args()

    L.llama_backend_init()
    L.llama_log_set(ctypes.cast(0, L.llama_log_callback) if hasattr(L, "llama_log_callback") else None, None) if False else None
    mparams = L.llama_model_default_params()
    model = L.llama_model_load_from_file(args.model.encode(), mparams)
    if not model:
        sys.exit(f"llama.cpp could not load {args.model}")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    cparams = L.llama_context_default_params()
    cparams.n_ctx = args.p + args.n
    cparams.n_batch = max(args.p, 1)
    cparams.n_ubatch = min(max(args.p, 1), 512)
    cparams.n_threads = args.threads
    cparams.n_threads_batch = args.threads
    cparams.no_perf = True
    ctx = L.llama_init_from_model(model, cparams)
    if not ctx:
        sys.exit("llama.cpp could not create a context")
    mem = L.llama_get_memory(ctx)
    bos = L.llama_vocab_bos(vocab)
    batch = L.llama_batch_init(max(args.p, 1), 0, 1)

    def decode(tokens, pos0):
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if i == len(tokens) - 1 else 0
        if L.llama_decode(ctx, batch) != 0:
            sys.exit("llama_decode failed")

    def run_pp(n):
        toks = [bos] + [random.randrange(n_vocab) for _ in range(n - 1)]
        t0 = time.perf_counter_ns()
        for s in range(0, n, cparams.n_batch):
            decode(toks[s:s + cparams.n_batch], s)
        L.llama_synchronize(ctx)
        return time.perf_counter_ns() - t0

    def run_tg(n):
        tok = bos
        t0 = time.perf_counter_ns()
        for i in range(n):
            decode([tok], i)
            L.llama_synchronize(ctx)
            tok = random.randrange(n_vocab)
        return time.perf_counter_ns() - t0

    out = {}
    for name, n, fn in (("pp", args.p, run_pp), ("tg", args.n, run_tg)):
        if n <= 0:
            continue
        L.llama_memory_clear(mem, True)
        fn(n if name == "pp" else 1)  # warm-up, as llama-bench
        tps = []
        for _ in range(args.reps):
            L.llama_memory_clear(mem, True)
            tps.append(n * 1e9 / fn(n))
        out[f"{name}_tps"] = statistics.mean(tps)
        out[f"{name}_std"] = statistics.stdev(tps) if len(tps) > 1 else 0.0
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
