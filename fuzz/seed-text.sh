#!/usr/bin/env bash
# Seed corpus for the fuzz targets of templates, grammars, tokenizers and requests in
# fuzz/corpus/TARGET (ignored by git), from real files of the repository and the shared fixtures:
#
# - jinja_template, go_template: every template of engine/tests/data/templates (alone, so the
#   target renders its default conversation, and with a few encoded messages, see
#   fuzz_targets/chat_input.rs);
# - grammar: GBNF from the grammar tests and Ollama's JSON grammar (engine/src/grammar), with and
#   without tokens to feed;
# - json_schema: the JSON schemas written in engine/tests/structured_output.rs and
#   engine/src/grammar/json_schema.rs, plus a few by hand;
# - tokenizer: llama.cpp's tokenizer test strings (shared/fixtures/vocab/*.inp) for every
#   vocabulary, and a few id sequences;
# - http_request: request bodies of every endpoint in the shapes of Ollama's and OpenAI's docs
#   (shared/reference/ollama.md), and the request JSON of the daemon's tests.
#
# Usage: fuzz/seed-text.sh TARGET   (fuzz/seed.sh calls this for those targets)
set -euo pipefail
cd "$(dirname "$0")"
target="${1:?usage: seed-text.sh jinja_template|go_template|grammar|json_schema|tokenizer|http_request}"
corpus="corpus/$target"
mkdir -p "$corpus"
python3 - "$target" "$corpus" <<'PY'
import glob, json, os, re, struct, sys
target, out = sys.argv[1], sys.argv[2]
seeds = []

def json_macros(paths):
    """The json!({...}) literals of Rust sources that are plain JSON."""
    found = []
    for p in paths:
        src = open(p).read()
        for m in re.finditer(r'json!\(\{', src):
            i, depth, in_str, esc = m.end() - 1, 0, False, False
            for j in range(i, len(src)):
                c = src[j]
                if in_str:
                    if esc: esc = False
                    elif c == '\\': esc = True
                    elif c == '"': in_str = False
                elif c == '"': in_str = True
                elif c in '{[': depth += 1
                elif c in '}]':
                    depth -= 1
                    if depth == 0:
                        try: found.append(json.loads(src[i:j + 1]))
                        except ValueError: pass
                        break
    return found

def raw_strings(paths):
    out = []
    for p in paths:
        out += re.findall(r'r#"(.*?)"#', open(p).read(), re.S)
    return out

# Message encoding of fuzz_targets/chat_input.rs: NUL, then per message a head byte (role index
# system 0, user 1, assistant 2, tool 3; 0x10 thinking, 0x20 a tool call, 0x40 a tool result)
# and its text, messages separated by NUL.
def chat(template, msgs):
    return template + b''.join(b'\0' + bytes([h]) + t for h, t in msgs)
convs = [
    [(0x0b, b'You are terse.'), (1, b'Hi'), (2, b'Hello!'), (1, b'Bye')],
    [(1 | 0x02, b'What is 2+2?'), (2 | 0x10, b'4'), (1, b'and 3+3?')],
    [(1, b'Weather?'), (2 | 0x20, b'get_weather'), (3 | 0x40, b'{"temp": 21}')],
]

if target in ('jinja_template', 'go_template'):
    d = '../engine/tests/data/templates/' + ('jinja' if target == 'jinja_template' else 'go')
    for p in sorted(glob.glob(d + '/*')):
        if not os.path.isfile(p) or p.endswith('.json'): continue
        t = open(p, 'rb').read()
        seeds.append(t)
        for c in convs: seeds.append(chat(t, c))
elif target == 'grammar':
    srcs = ['../engine/src/grammar/tests.rs', '../engine/src/grammar/json_schema.rs', '../engine/src/grammar/parse.rs']
    gs = [s for s in raw_strings(srcs) if '::=' in s]
    gs += [
        'root ::= "{" ws pair ("," ws pair)* "}"\npair ::= str ws ":" ws val\nstr ::= "\\"" [^"\\\\]* "\\""\nval ::= str | [0-9]+ | "true" | "null"\nws ::= [ \\t\\n]*\n',
        'root ::= (expr "=" term "\\n")+\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+\n',
        'root ::= <[256]> [^\\x00]{1,8} !<[257]>? "x"{2,5}\n',
    ]
    for g in gs:
        b = g.encode()
        seeds += [b, b + b'\0', b + b'\0{"a": true}', b + b'\0' + bytes(range(0xf0, 0xfd))]
elif target == 'json_schema':
    schemas = json_macros(['../engine/tests/structured_output.rs', '../engine/src/grammar/json_schema.rs'])
    for s in raw_strings(['../engine/tests/structured_output.rs', '../engine/src/grammar/json_schema.rs']):
        try: v = json.loads(s)
        except ValueError: continue
        if isinstance(v, dict) and any(k in v for k in ('type', '$ref', 'properties', 'oneOf', 'anyOf', 'enum', 'const')):
            schemas.append(v)
    schemas += [
        {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 20},
          "age": {"type": "integer", "minimum": 0, "maximum": 150}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
         "required": ["name"], "additionalProperties": False},
        {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "number"}, "next": {"$ref": "#/$defs/node"}}}}, "$ref": "#/$defs/node"},
        {"oneOf": [{"const": "a"}, {"enum": [1, None, True, "x"]}, {"type": ["string", "null"], "pattern": "^[a-z]{2,4}-\\d+$"}]},
        {"type": "string", "format": "date-time"}, {"type": "integer", "exclusiveMinimum": -5, "maximum": 12345},
        {"allOf": [{"type": "object", "properties": {"a": {"type": "boolean"}}}, {"properties": {"b": {"type": "number"}}}]},
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}], "minItems": 1, "maxItems": 4},
        {"type": "object", "patternProperties": {"^x": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
    ]
    seen = set()
    for s in schemas:
        b = json.dumps(s).encode()
        if b not in seen:
            seen.add(b); seeds.append(b)
elif target == 'tokenizer':
    paths = sorted(glob.glob('../../shared/fixtures/vocab/*.gguf'))
    for i, p in enumerate(paths):
        texts = open(p + '.inp', encoding='utf-8').read().split('\n__ggml_vocab_test__\n')[:-1]
        for k, t in enumerate(texts[::3]):
            seeds.append(bytes([i, k & 3]) + t.encode())
        seeds.append(bytes([i, 3]) + b'<s><|im_start|>user\nhi<|im_end|>[CLS] </s>')
        seeds.append(bytes([i, 4 | 16 | 32]) + b''.join(struct.pack('<I', x) for x in [1, 2, 3, 100, 1000, 29871, 13]))
        seeds.append(bytes([i, 4 | 8 | 64]) + b''.join(struct.pack('<I', x) for x in [0, 0xffffffff, 2**31, 5]))
elif target == 'http_request':
    bodies = [  # (endpoint: 0 chat, 1 generate, 2 OpenAI chat, 3 OpenAI completions, 4 embed, 5 embeddings, 6 responses, 7 messages)
        (0, {"model": "llama3.2", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why is the sky blue?", "images": ["aGk="]}],
             "stream": False, "options": {"temperature": 0.2, "top_k": 20, "num_ctx": 4096, "stop": ["\n\n"], "seed": 42}, "keep_alive": "5m", "think": "high"}),
        (0, {"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
             {"role": "tool", "content": "1", "tool_name": "f"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
             "format": {"type": "object", "properties": {"a": {"type": "number"}}}, "logprobs": True, "top_logprobs": 3}),
        (1, {"model": "llama3.2", "prompt": "def f(", "suffix": "return x", "options": {"num_predict": 128, "mirostat": 2, "repeat_last_n": -1},
             "format": "json", "raw": False, "keep_alive": -1, "context": [1, 2, 3], "template": "{{ .Prompt }}", "think": False}),
        (1, {"model": "m", "prompt": "", "keep_alive": 0}),
        (2, {"model": "gpt", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:"}}]}],
             "temperature": 0.7, "max_tokens": 64, "stop": ["x", "y"], "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string"}}},
             "reasoning_effort": "low", "stream": True, "stream_options": {"include_usage": True}, "seed": 3, "top_p": 0.9}),
        (2, {"model": "gpt", "messages": [{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "ok"}], "frequency_penalty": 1.5, "presence_penalty": -2, "logprobs": True, "top_logprobs": 20}),
        (3, {"model": "m", "prompt": ["once upon"], "max_tokens": 5, "stop": "\n", "logprobs": 2, "suffix": "end", "temperature": 0}),
        (4, {"model": "all-minilm", "input": ["a", "b"], "truncate": False, "dimensions": 8, "options": {"num_ctx": 256}}),
        (5, {"model": "all-minilm", "prompt": "hello", "keep_alive": "1h30m"}),
        (6, {"model": "m", "instructions": "be brief", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
             {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
             {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]}],
             "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}, {"type": "namespace", "name": "n", "tools": [{"type": "function", "name": "g"}]}],
             "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]},
             "max_output_tokens": 16, "reasoning": {"effort": "low"}, "truncation": "auto", "stream": True}),
        (6, {"model": "m", "input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
             "include": ["message.output_text.logprobs"], "top_logprobs": 2, "temperature": 0.5, "top_p": 0.9}),
        (7, {"model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
             "messages": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                                            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "ok"}]}]}],
             "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"},
             "stop_sequences": ["END"], "top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}, "stream": True}),
    ]
    for t, b in bodies:
        seeds.append(bytes([t]) + json.dumps(b).encode())
    for v in json_macros(glob.glob('../daemon/src/*.rs')):
        if isinstance(v, dict) and 'model' in v:
            for t in range(8): seeds.append(bytes([t]) + json.dumps(v).encode())
else:
    sys.exit(f"seed-text.sh: unknown target {target}")
for i, s in enumerate(seeds):
    open(os.path.join(out, f"seed{i}"), "wb").write(s)
print(f"{out}: {len(seeds)} seeds", file=sys.stderr)
PY
