#!/usr/bin/env python3
"""llama.cpp's tokenizer speed on the same text as engine/benches/tokenizer.rs, for a ratio.

Mean thread CPU time of: loading the model with vocab_only (GGUF parse and vocabulary), and
tokenizing ~4 KB with add_special and parse_special on and off. Needs llama-cpp-python.

    python scripts/tokenizer-bench.py MODEL.gguf [...]
"""
import sys
import time

from llama_cpp import Llama


def sample_text():
    prose = ("The quick brown fox jumps over the lazy dog. Tokenizers split text into pieces "
             "that a language model knows; good ones are fast, exact and boring. ")
    code = "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * 2).collect();\n    println!(\"{v:?}\");\n}\n"
    chat = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<start_of_turn>model\nFour.<end_of_turn>\n"
    s = ""
    while len(s.encode()) < 4096:
        s += prose + code + chat + "Grüße, 日本語, русский — 😀\n"
    return s


def cpu(runs, f):
    t = time.thread_time()
    for _ in range(runs):
        f()
    return (time.thread_time() - t) / runs * 1e3


text = sample_text().encode()
for path in sys.argv[1:]:
    load = cpu(3, lambda: Llama(model_path=path, vocab_only=True, verbose=False))
    llm = Llama(model_path=path, vocab_only=True, verbose=False)
    raw = cpu(500, lambda: llm.tokenize(text, add_bos=True, special=False))
    special = cpu(500, lambda: llm.tokenize(text, add_bos=True, special=True))
    n = len(llm.tokenize(text, add_bos=True, special=True))
    print(path)
    print(f"  load (vocab_only)     {load:8.2f} ms")
    print(f"  tokenize {len(text)} bytes -> {n} tokens: {raw:.3f} ms (parse_special: {special:.3f} ms)")
