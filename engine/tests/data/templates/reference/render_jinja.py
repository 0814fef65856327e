#!/usr/bin/env python3
"""Reference renderings of the Jinja chat templates, made by Hugging Face's own code.

Writes jinja/expected/<template>/<case>.txt for every template and case in jinja/manifest.json,
using transformers' `render_jinja_template` (jinja2, HF's environment: trim/lstrip blocks, loop
controls, its `tojson`, `raise_exception`, `strftime_now`). The Rust tests compare our minijinja
rendering with these files byte for byte.

The messages are given to the template in the OpenAI shape llama.cpp builds from an Ollama
request (the same rules as engine/src/template/jinja.rs: keys only when they carry something,
tool-call arguments as objects, `reasoning_content` for thinking, `name` for a tool result), plus
the variables llama.cpp passes (`date_string`, `enable_thinking` when `think` is set).

Usage (jinja2 and transformers in a throwaway venv, not the repo):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install jinja2 transformers
    /tmp/venv/bin/python engine/tests/data/templates/reference/render_jinja.py
"""

import datetime as dt
import json
import os
import sys

from transformers.utils import chat_template_utils as ctu

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The instant every test renders at: 2024-07-26 14:05:09 UTC.
NOW = dt.datetime(2024, 7, 26, 14, 5, 9)


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = FixedDatetime


def openai_message(m):
    out = {"role": m["role"], "content": m.get("content", "")}
    if m.get("thinking"):
        out["reasoning_content"] = m["thinking"]
    if m.get("tool_name") is not None:
        out["name"] = m["tool_name"]
    if m.get("tool_call_id") is not None:
        out["tool_call_id"] = m["tool_call_id"]
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            call = {}
            if c.get("id") is not None:
                call["id"] = c["id"]
            call["type"] = "function"
            call["function"] = {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            calls.append(call)
        out["tool_calls"] = calls
    return out


def render(template, messages, tools, add_generation_prompt, bos, eos, think):
    kwargs = {"bos_token": bos, "eos_token": eos, "date_string": NOW.strftime("%d %b %Y")}
    if think is not None:
        kwargs["enable_thinking"] = think is not False
        if isinstance(think, str):
            kwargs["reasoning_effort"] = think
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages],
        tools=tools or None,
        chat_template=template,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    return rendered[0]


def supports_system_role(template):
    needle = "<<ollamars system probe 7f3a>>"
    msgs = [{"role": "system", "content": needle}, {"role": "user", "content": "hello"}]
    # Templates written for tools only fail without any: probe again with a dummy tool.
    dummy = [{"type": "function", "function": {"name": "probe", "description": "probe", "parameters": {"type": "object", "properties": {}, "required": []}}}]
    for tools in (None, dummy):
        try:
            return needle in render(template, msgs, tools, True, "", "", None)
        except Exception:
            continue
    return False


def main():
    manifest = json.load(open(os.path.join(ROOT, "jinja", "manifest.json"), encoding="utf-8"))
    for name, spec in manifest.items():
        template = open(os.path.join(ROOT, "jinja", name + ".jinja"), encoding="utf-8").read()
        outdir = os.path.join(ROOT, "jinja", "expected", name)
        os.makedirs(outdir, exist_ok=True)
        system_ok = supports_system_role(template)
        for case in spec["cases"]:
            c = json.load(open(os.path.join(ROOT, "cases", case + ".json"), encoding="utf-8"))
            messages = [openai_message(m) for m in c["messages"]]
            if not system_ok and messages and messages[0]["role"] == "system":
                sys_msg = messages.pop(0)
                if messages:
                    messages[0]["content"] = sys_msg["content"] + "\n" + messages[0]["content"]
            out = render(
                template,
                messages,
                c.get("tools"),
                c.get("add_generation_prompt", True),
                spec["bos"],
                spec["eos"],
                c.get("think"),
            )
            with open(os.path.join(outdir, case + ".txt"), "w", encoding="utf-8", newline="") as f:
                f.write(out)
            print(f"{name}/{case}: {len(out)} chars", file=sys.stderr)


if __name__ == "__main__":
    main()
