#!/usr/bin/env bash
# Seed corpus for the registry's fuzz targets (modelfile, model_name, registry_manifest) in
# fuzz/corpus/TARGET (ignored by git): small hand-made inputs covering every form.
#
# Usage: fuzz/seed-registry.sh TARGET   (fuzz/seed.sh calls this for those targets)
set -euo pipefail
cd "$(dirname "$0")"
target="${1:?usage: seed-registry.sh modelfile|model_name|registry_manifest}"
corpus="corpus/$target"
mkdir -p "$corpus"
python3 - "$target" "$corpus" <<'PY'
import os, sys, hashlib
target, out = sys.argv[1], sys.argv[2]
d = lambda b: "sha256:" + hashlib.sha256(b).hexdigest()
seeds = {
  "modelfile": [
    'FROM llama3.2\nPARAMETER temperature 0.7\nPARAMETER stop <|eot_id|>\nPARAMETER stop "<|end|>"\n',
    'from ./model.gguf\nTEMPLATE """{{ if .System }}{{ .System }}{{ end }}\n{{ .Prompt }}"""\nSYSTEM "be brief"\n',
    '\ufeff# comment\r\nFROM x\r\nMESSAGE user hi\r\nMESSAGE assistant "hello\nthere"\rLICENSE MIT\n',
    'FROM x\nADAPTER ./lora.gguf\nREQUIRES 0.14.0\nDRAFT d\nRENDERER r\nPARSER p\nPARAMETER num_ctx 4096\nPARAMETER use_mmap true\nPARAMETER mirostat 1\n',
    'FROM x\nSYSTEM """unterminated\n',
    'FROM x\nPARAMETER topk 3\n',
  ],
  "model_name": [
    "llama3.2", "llama3.2:1b", "me/mine:v1", "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
    "localhost:5000/ns/m:tag", "http://127.0.0.1:5000/library/tiny:1", "../../etc/passwd", "a//b", "m:",
    d(b""), "sha256-" + hashlib.sha256(b"").hexdigest(),
  ],
  "registry_manifest": [
    '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"%s","size":2},"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"%s","size":5,"from":"x:latest"}]}' % (d(b"{}"), d(b"model")),
    '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"digest":"%s","size":2},"layers":[],"annotations":{"a":"b"}}' % d(b"{}"),
    '{"schemaVersion":2,"config":{"digest":"sha256:../../etc/passwd","size":1}}',
    '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}',
  ],
}[target]
for i, s in enumerate(seeds):
    open(os.path.join(out, f"seed{i}"), "wb").write(s.encode())
print(f"{out}: {len(seeds)} seeds", file=sys.stderr)
PY
