#!/usr/bin/env python3
"""Records llama.cpp's sampler choices on synthetic logits, for engine/src/sample/tests.rs.

Run with a llama-cpp-python virtualenv (it builds llama.cpp from source):
    /path/to/venv/bin/python scripts/sampling-reference.py
and paste the printed table into `LLAMA_CPP_REFERENCE` in the test. The logits formula is
repeated exactly (every step an exactly rounded f32 operation) in the Rust test.
"""
import ctypes

import llama_cpp as L
import numpy as np

N_VOCAB = 4096
STEPS = 24
F = np.float32


def logits(step):
    # A permutation of 0..4096 (odd multiplier), mapped through a strictly increasing curve: every
    # logit is distinct, so no result depends on how ties are ordered.
    i = np.arange(N_VOCAB, dtype=np.uint64)
    a = ((i * np.uint64(2654435761) + np.uint64(step * 977)) % np.uint64(N_VOCAB)).astype(np.float32)
    x = a / F(N_VOCAB)
    return (x * x * F(20 + step % 5) - F(5)).astype(np.float32)


CONFIGS = [
    # name, temp, top_k, top_p, min_p, typical, last_n, repeat, freq, present, mirostat, seed
    ("ollama-defaults", 0.8, 40, 0.9, 0.0, 1.0, 64, 1.0, 0.0, 0.0, 0, 42),
    ("plain-dist", 1.0, 0, 1.0, 0.0, 1.0, 64, 1.0, 0.0, 0.0, 0, 7),
    ("top-p-min-p-hot", 1.5, 0, 0.5, 0.05, 1.0, 64, 1.0, 0.0, 0.0, 0, 1234),
    ("typical", 1.0, 100, 1.0, 0.0, 0.7, 64, 1.0, 0.0, 0.0, 0, 99),
    ("penalties", 0.9, 20, 0.95, 0.0, 1.0, 16, 1.3, 0.2, 0.4, 0, 5),
    ("greedy-penalties", 0.0, 40, 0.9, 0.0, 1.0, 8, 1.5, 0.0, 0.0, 0, 3),
    ("mirostat-1", 0.8, 40, 0.9, 0.0, 1.0, 64, 1.0, 0.0, 0.0, 1, 11),
    ("mirostat-2", 0.8, 40, 0.9, 0.0, 1.0, 64, 1.0, 0.0, 0.0, 2, 12),
]


def chain(temp, top_k, top_p, min_p, typical, last_n, repeat, freq, present, mirostat, seed):
    c = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    add = lambda s: L.llama_sampler_chain_add(c, s)
    add(L.llama_sampler_init_penalties(N_VOCAB, last_n, repeat, freq, present))
    if mirostat == 0:
        add(L.llama_sampler_init_top_k(top_k))
        add(L.llama_sampler_init_typical(typical, 0))
        add(L.llama_sampler_init_top_p(top_p, 0))
        add(L.llama_sampler_init_min_p(min_p, 0))
        add(L.llama_sampler_init_temp_ext(temp, 0.0, 1.0))
        add(L.llama_sampler_init_dist(seed))
    elif mirostat == 1:
        add(L.llama_sampler_init_temp(temp))
        add(L.llama_sampler_init_mirostat(N_VOCAB, seed, 5.0, 0.1, 100))
    else:
        add(L.llama_sampler_init_temp(temp))
        add(L.llama_sampler_init_mirostat_v2(seed, 5.0, 0.1))
    return c


for name, *params in CONFIGS:
    c = chain(*params)
    toks = []
    for step in range(STEPS):
        lg = logits(step)
        data = (L.llama_token_data * N_VOCAB)()
        for i in range(N_VOCAB):
            data[i].id = i
            data[i].logit = float(lg[i])
            data[i].p = 0.0
        arr = L.llama_token_data_array(data, N_VOCAB, -1, False)
        L.llama_sampler_apply(c, ctypes.byref(arr))
        tok = arr.data[arr.selected].id
        L.llama_sampler_accept(c, tok)
        toks.append(tok)
    L.llama_sampler_free(c)
    print(f'    ("{name}", &{toks}),')
