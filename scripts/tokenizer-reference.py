#!/usr/bin/env python3
"""Records llama.cpp's tokenization of a few strings with the two real test models, as test data
for engine/tests/tokenizer_models.rs (ids for three add_special/parse_special combinations, the
detokenized text, and the special and end-of-generation ids).

Needs the llama-cpp-python package (llama.cpp built from source) and the models fetched by
scripts/fetch-model.sh:

    python scripts/tokenizer-reference.py > engine/tests/data/tokenizer-models.json
"""
import ctypes
import json
import os

from llama_cpp import Llama
import llama_cpp
models = {
 "gemma": os.path.expanduser("~/.cache/ollamars-test-models/gemma-3-270m-q4_k_m.gguf"),
 "qwen": os.path.expanduser("~/.cache/ollamars-test-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
}
texts = [
 "Hello world",
 " Hello  world ",
 "The quick brown fox jumps over the lazy dog.",
 "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
 "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
 "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
 "Grüße aus Köln! 日本語のテキスト。 Ελληνικά, русский текст, 한국어 😀🎉",
 "  \n\n\t\t  tabs\tand   spaces\r\n",
 "1234567890 3.14159 1,000,000",
 "I'm sure you've seen they'll DON'T it's",
 "<table><tr><td>x</td></tr></table>",
 "\u00a0\u2009thin\u3000space",
 "unknown control \u0001\u0002 bytes",
]
out = {}
for name, path in models.items():
    llm = Llama(model_path=path, vocab_only=True, verbose=False)
    cases = []
    for t in texts:
        for add_special, parse_special in [(False, False), (True, False), (True, True)]:
            ids = llm.tokenize(t.encode(), add_bos=add_special, special=parse_special)
            cases.append({"text": t, "add_special": add_special, "parse_special": parse_special, "ids": ids})
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    eog = [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    info = {"bos": llama_cpp.llama_vocab_bos(vocab), "eos": llama_cpp.llama_vocab_eos(vocab), "eot": llama_cpp.llama_vocab_eot(vocab), "eog": eog, "n_tokens": n,
            "nl": llama_cpp.llama_vocab_nl(vocab), "fim_pre": llama_cpp.llama_vocab_fim_pre(vocab), "fim_suf": llama_cpp.llama_vocab_fim_suf(vocab), "fim_mid": llama_cpp.llama_vocab_fim_mid(vocab), "fim_pad": llama_cpp.llama_vocab_fim_pad(vocab), "fim_rep": llama_cpp.llama_vocab_fim_rep(vocab), "fim_sep": llama_cpp.llama_vocab_fim_sep(vocab)}
    # detokenize of each case (remove_special=False, unparse_special=False / True)
    for c in cases:
        ids = c["ids"]
        arr = (llama_cpp.llama_token * max(1,len(ids)))(*ids)
        buf = ctypes.create_string_buffer(65536)
        nb = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, 65536, False, False)
        c["detok"] = buf.raw[:nb].decode("utf-8", "replace")
        nb = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, 65536, False, True)
        c["detok_special"] = buf.raw[:nb].decode("utf-8", "replace")
    out[name] = {"model_file": os.path.basename(path), "vocab": info, "cases": cases}
out["llama_cpp_python"] = llama_cpp.__version__
print(json.dumps(out, ensure_ascii=False, indent=1))
