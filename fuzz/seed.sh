#!/usr/bin/env bash
# Builds the seed corpus of a fuzz target in fuzz/corpus/TARGET (ignored by git).
#
# gguf_reader: every GGUF fixture of the shared fixtures whole, the first 4 KiB and 64 KiB of each
# (so the fuzzer also starts from short inputs), and a few small hand-made files that reach the
# tensor infos quickly (every metadata type, nested arrays, split keys, general.alignment 64).
# Other targets add their recipe below; without one a target starts from an empty corpus.
#
# Usage: fuzz/seed.sh [TARGET]   (TARGET defaults to gguf_reader)
set -euo pipefail
cd "$(dirname "$0")"
target="${1:-gguf_reader}"
fixtures="../../shared/fixtures"
corpus="corpus/$target"
mkdir -p "$corpus"
case "$target" in
gguf_reader)
n=0
for f in "$fixtures"/{tiny,quant,vocab}/*.gguf; do
  base="$(basename "$f" .gguf)"
  cp "$f" "$corpus/$base.gguf"
  head -c 4096 "$f" > "$corpus/$base.head4k"
  head -c 65536 "$f" > "$corpus/$base.head64k"
  n=$((n + 3))
done
python3 - "$corpus" <<'PY'
import struct, sys, os
out = sys.argv[1]
def s(b): return struct.pack('<Q', len(b)) + b
def kv(k, t, v): return s(k.encode()) + struct.pack('<I', t) + v
def arr(t, items, enc): return struct.pack('<IQ', t, len(items)) + b''.join(enc(x) for x in items)
def tensor(name, dims, ty, off):
    return s(name.encode()) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims) + struct.pack('<IQ', ty, off)
def gguf(kvs, tensors, data, align=32):
    b = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs)) + b''.join(kvs) + b''.join(tensors)
    if tensors: b += b'\0' * (-len(b) % align)
    return b + data
every = [
    kv('general.architecture', 8, s(b'llama')),
    kv('u8', 0, b'\x01'), kv('i8', 1, b'\xfe'), kv('u16', 2, struct.pack('<H', 3)),
    kv('i16', 3, struct.pack('<h', -4)), kv('u32', 4, struct.pack('<I', 5)),
    kv('i32', 5, struct.pack('<i', -6)), kv('f32', 6, struct.pack('<f', 0.5)),
    kv('bool', 7, b'\x01'), kv('u64', 10, struct.pack('<Q', 1 << 40)),
    kv('i64', 11, struct.pack('<q', -1 << 40)), kv('f64', 12, struct.pack('<d', -0.25)),
    kv('tokens', 9, arr(8, [b'<s>', b'', b'\xe2\x96\x81a'], s)),
    kv('scores', 9, arr(6, [0.0, -1.0], lambda x: struct.pack('<f', x))),
    kv('nested', 9, arr(9, [1, 2], lambda n: arr(4, list(range(n)), lambda x: struct.pack('<I', x)))),
]
tensors = [tensor('token_embd.weight', [32, 2], 8, 0), tensor('norm', [4], 0, 96), tensor('w', [256], 12, 128)]
data = bytes(68) + bytes(28) + bytes(16) + bytes(16) + bytes(144)
files = {
    'every-type.gguf': gguf(every, tensors, data),
    'no-tensors.gguf': gguf(every[:3], [], b''),
    'split-part.gguf': gguf([kv('split.no', 2, struct.pack('<H', 1)), kv('split.count', 2, struct.pack('<H', 3)),
                             kv('split.tensors.count', 5, struct.pack('<i', 5))], tensors[:1], bytes(68)),
    'align64.gguf': gguf([kv('general.alignment', 4, struct.pack('<I', 64))],
                         [tensor('a', [8], 0, 0), tensor('b', [2, 2, 2, 2], 30, 64)], bytes(96), 64),
}
for name, b in files.items():
    open(os.path.join(out, name), 'wb').write(b)
PY
echo "$corpus: $((n + 4)) seeds" >&2
;;
modelfile|model_name|registry_manifest)
  exec ./seed-registry.sh "$target"
;;
jinja_template|go_template|grammar|json_schema|tokenizer|http_request)
  exec ./seed-text.sh "$target"
;;
*)
  echo "$corpus: no seed recipe for $target, starting empty" >&2
;;
esac
