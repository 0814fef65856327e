#!/usr/bin/env python3
"""llama.cpp's speed on a GGUF file by llama-bench's method, through llama-cpp-python's low-level API.

pp: one batch of P random tokens decoded from an empty context; tg: N tokens decoded one at a
time from an empty context; one warm-up run of each, then R timed repetitions. With -d D each
test starts after D random tokens (decoded untimed, as llama-bench's -d). Prints the same JSON
as `ollamars bench --json`: {"pp_tps","pp_std","tg_tps","tg_std"}.

usage: llama_bench.py MODEL.gguf [-p 512] [-n 128] [-t 2] [-r 5] [-d 0]
"""

import argparse
import ctypes
import json
import random
import statistics
import time

import llama_cpp as L


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-d", type=int, default=0)
    a = ap.parse_args()

    @ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    def quiet(level, text, user):
        pass

    L.llama_log_set(quiet, None)
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        raise SystemExit(f"cannot load {a.model}")
    cp = L.llama_context_default_params()
    cp.n_ctx = a.d + max(a.p, a.n, 1)
    cp.n_batch = max(a.p, a.d, 1)
    cp.n_ubatch = min(max(a.p, a.d, 1), 512)
    cp.n_threads = a.t
    cp.n_threads_batch = a.t
    ctx = L.llama_init_from_model(model, cp)
    mem = L.llama_get_memory(ctx)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    rng = random.Random(1)

    def decode(toks):
        arr = (L.llama_token * len(toks))(*toks)
        if L.llama_decode(ctx, L.llama_batch_get_one(arr, len(toks))) != 0:
            raise SystemExit("llama_decode failed")

    def at_depth():
        # The previous test's tokens are removed again while every layer still holds position 0
        # (a sliding-window cache forgets it); otherwise the D tokens are decoded anew.
        if a.d > 0 and L.llama_memory_seq_pos_min(mem, 0) == 0 and L.llama_memory_seq_pos_max(mem, 0) >= a.d - 1:
            if L.llama_memory_seq_rm(mem, 0, a.d, -1):
                return
        L.llama_memory_clear(mem, True)
        if a.d > 0:
            decode([rng.randrange(n_vocab) for _ in range(a.d)])

    def run(n_tokens, one_at_a_time):
        at_depth()
        toks = [rng.randrange(n_vocab) for _ in range(n_tokens)]
        t0 = time.perf_counter()
        if one_at_a_time:
            for t in toks:
                decode([t])
        else:
            decode(toks)
        L.llama_synchronize(ctx)
        return time.perf_counter() - t0

    def measure(n, one):
        if n == 0:
            return 0.0, 0.0
        run(n if not one else 1, one)
        v = [n / run(n, one) for _ in range(a.r)]
        return statistics.mean(v), (statistics.stdev(v) if len(v) > 1 else 0.0)

    pp, pps = measure(a.p, False)
    tg, tgs = measure(a.n, True)
    print(json.dumps({"pp_tps": pp, "pp_std": pps, "tg_tps": tg, "tg_std": tgs}))
    L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
