"""The official `ollama`, `openai` and `anthropic` Python clients against a live ollamars daemon.

Run by tests/tests/python_clients.rs, which starts the daemon and a registry and sets:
  OLLAMA_HOST        the daemon (host:port)
  TEST_GGUF          a tiny GGUF file to upload with create_blob
  TEST_REGISTRY      host:port of a plain-HTTP registry for push/pull
  TEST_CHAT_MODEL    a model with a real chat template and tools (Qwen2.5-Coder 0.5B)
The models "tiny" (noise replies, fast) and TEST_CHAT_MODEL exist when it starts.
Every client function is called once at least; each check prints its name, and the first
failure ends the run with a traceback and exit status 1.
"""

import json
import os
import sys
import traceback

import anthropic
import ollama
import openai

HOST = os.environ["OLLAMA_HOST"]
GGUF = os.environ["TEST_GGUF"]
REGISTRY = os.environ["TEST_REGISTRY"]
CHAT = os.environ["TEST_CHAT_MODEL"]

client = ollama.Client(host=f"http://{HOST}")
oai = openai.OpenAI(base_url=f"http://{HOST}/v1", api_key="ollamars")
claude = anthropic.Anthropic(base_url=f"http://{HOST}", api_key="ollamars")

TOOLS = [{"type": "function", "function": {
    "name": "get_current_weather",
    "description": "Get the current weather for a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "description": "The city name"}},
                   "required": ["city"]}}}]

HISTORY = [{"role": "user", "content": "What is the weather in Paris right now?"}]

TINY = {"num_predict": 3, "seed": 1}


def check_generate():
    r = client.generate(model="tiny", prompt="hello", options=TINY)
    assert r.done and r.done_reason == "length" and r.eval_count == 3, r
    assert r.context and r.total_duration > 0, r
    parts = list(client.generate(model="tiny", prompt="hello", options=TINY, stream=True))
    assert parts[-1].done and not parts[0].done, parts
    assert "".join(p.response for p in parts) == r.response


def check_chat_tools():
    r = client.chat(model=CHAT, messages=HISTORY, tools=TOOLS,
                    options={"temperature": 0, "num_predict": 64})
    calls = r.message.tool_calls
    assert calls and calls[0].function.name == "get_current_weather", r
    assert "Paris" in calls[0].function.arguments["city"], r
    streamed = [c for part in client.chat(model=CHAT, messages=HISTORY, tools=TOOLS, stream=True,
                                          options={"temperature": 0, "num_predict": 64})
                for c in (part.message.tool_calls or [])]
    assert [c.function.name for c in streamed] == ["get_current_weather"], streamed


def check_embed():
    r = client.embed(model="tiny", input=["one", "two"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == 64, r
    r = client.embeddings(model="tiny", prompt="one")
    assert len(r.embedding) == 64, r


def check_blobs_and_create():
    digest = client.create_blob(GGUF)
    assert digest.startswith("sha256:") and len(digest) == 71, digest
    # The blob exists now (the client has no call for HEAD; use its HTTP session).
    assert client._client.head(f"/api/blobs/{digest}").status_code == 200
    missing = "sha256:" + "0" * 64
    assert client._client.head(f"/api/blobs/{missing}").status_code == 404
    name = os.path.basename(GGUF)
    r = client.create(model="made", files={name: digest}, system="You are terse.",
                      parameters={"temperature": 0.5})
    assert r.status == "success", r
    steps = [p.status for p in client.create(model="made2", from_="made", stream=True)]
    assert steps[-1] == "success", steps


def check_list_show_copy_ps_delete():
    names = {m.model for m in client.list().models}
    assert {"tiny:latest", "made:latest"} <= names, names
    s = client.show("made")
    assert "You are terse." in s.modelfile, s
    assert s.modelinfo["general.architecture"] == "llama", s
    assert "temperature" in (s.parameters or ""), s
    client.copy("made", "made-copy")
    assert "made-copy:latest" in {m.model for m in client.list().models}
    client.generate(model="made-copy", prompt="", keep_alive="1m")
    assert any(m.model == "made-copy:latest" for m in client.ps().models), client.ps()
    client.delete("made-copy")
    try:
        client.show("made-copy")
        raise AssertionError("a deleted model is still shown")
    except ollama.ResponseError as e:
        assert e.status_code == 404, e


def check_push_pull():
    remote = f"{REGISTRY}/test/tiny:latest"
    client.copy("tiny", remote)
    steps = [p.status for p in client.push(remote, insecure=True, stream=True)]
    assert steps[-1] == "success", steps
    client.delete(remote)
    r = client.pull(remote, insecure=True)
    assert r.status == "success", r
    assert remote in {m.model for m in client.list().models}
    r = client.generate(model=remote, prompt="hi", options=TINY)
    assert r.eval_count == 3, r


def check_errors():
    try:
        client.generate(model="no-such-model", prompt="hi")
        raise AssertionError("no error for a missing model")
    except ollama.ResponseError as e:
        assert e.status_code == 404 and "not found" in e.error, e


def check_openai_chat():
    r = oai.chat.completions.create(model="tiny", max_tokens=3, seed=1,
                                    messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3, r
    chunks = list(oai.chat.completions.create(model="tiny", max_tokens=3, seed=1, stream=True,
                                              stream_options={"include_usage": True},
                                              messages=[{"role": "user", "content": "hi"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content, (text, r)
    assert chunks[-1].usage.completion_tokens == 3, chunks[-1]
    r = oai.chat.completions.create(model=CHAT, temperature=0, max_tokens=64, tools=TOOLS,
                                    messages=HISTORY)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_current_weather", r
    assert "Paris" in json.loads(call.function.arguments)["city"], r


def check_openai_completions_embeddings_models():
    r = oai.completions.create(model="tiny", prompt="once upon", max_tokens=2)
    assert r.usage.completion_tokens == 2 and isinstance(r.choices[0].text, str), r
    r = oai.embeddings.create(model="tiny", input=["a", "b"])
    assert len(r.data) == 2 and len(r.data[0].embedding) == 64, r
    ids = {m.id for m in oai.models.list()}
    assert "tiny:latest" in ids, ids
    assert oai.models.retrieve("tiny:latest").id == "tiny:latest"
    try:
        oai.models.retrieve("no-such-model")
        raise AssertionError("no error for a missing model")
    except openai.NotFoundError:
        pass


def check_openai_responses():
    r = oai.responses.create(model="tiny", input="hi", max_output_tokens=3,
                             extra_body={"options": {"seed": 1}})
    assert r.status == "incomplete" and r.usage.output_tokens == 3, r
    with oai.responses.stream(model="tiny", input="hi", max_output_tokens=3,
                              extra_body={"options": {"seed": 1}}) as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
    assert text == r.output_text, (text, r)
    # A tool round trip with the output items passed back as the next input.
    tools = [{"type": "function", **TOOLS[0]["function"]}]
    history = list(HISTORY)
    r = oai.responses.create(model=CHAT, temperature=0, max_output_tokens=64, tools=tools,
                             input=history)
    call = next(o for o in r.output if o.type == "function_call")
    assert call.name == "get_current_weather" and "Paris" in json.loads(call.arguments)["city"], r
    history += [o.model_dump(exclude_none=True) for o in r.output]
    history.append({"type": "function_call_output", "call_id": call.call_id,
                    "output": json.dumps({"temperature_c": 21})})
    with oai.responses.stream(model=CHAT, temperature=0, max_output_tokens=64, tools=tools,
                              input=history) as s:
        final = s.get_final_response()
    assert final.status == "completed" and final.output_text, final
    # Structured output through the client's parse helper.
    from pydantic import BaseModel

    class Capital(BaseModel):
        city: str
        country: str

    r = oai.responses.parse(model=CHAT, temperature=0, max_output_tokens=64,
                            input="What is the capital of France?", text_format=Capital)
    assert r.output_parsed.city == "Paris", r


def check_anthropic_messages():
    seed = {"options": {"seed": 1}}
    m = claude.messages.create(model="tiny", max_tokens=3, extra_body=seed,
                               messages=[{"role": "user", "content": "hi"}])
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3, m
    with claude.messages.stream(model="tiny", max_tokens=3, extra_body=seed,
                                messages=[{"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
    assert text == m.content[0].text, (text, m)
    # A tool round trip, the reply's blocks passed back as the assistant turn.
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    history = list(HISTORY)
    m = claude.messages.create(model=CHAT, max_tokens=64, tools=tools, messages=history,
                               extra_body={"temperature": 0})
    use = next(b for b in m.content if b.type == "tool_use")
    assert m.stop_reason == "tool_use" and "Paris" in use.input["city"], m
    count = claude.messages.count_tokens(model=CHAT, tools=tools, messages=history)
    assert count.input_tokens == m.usage.input_tokens, (count, m.usage)
    history += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                              "content": "21 degrees and sunny"}]}]
    with claude.messages.stream(model=CHAT, max_tokens=64, tools=tools, messages=history,
                                extra_body={"temperature": 0}) as s:
        final = s.get_final_message()
    assert final.content and final.usage.output_tokens > 0, final
    # A stop sequence of the request's ends the reply and is named.
    m = claude.messages.create(model=CHAT, max_tokens=64, stop_sequences=["5"],
                               messages=[{"role": "user", "content": "Count from 1 to 10."}],
                               extra_body={"temperature": 0})
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "5", m
    assert "4" in m.content[0].text and "5" not in m.content[0].text, m
    try:
        claude.messages.create(model="no-such-model", max_tokens=3,
                               messages=[{"role": "user", "content": "x"}])
        raise AssertionError("no error for a missing model")
    except anthropic.NotFoundError:
        pass


CHECKS = [check_generate, check_chat_tools, check_embed,
          check_blobs_and_create, check_list_show_copy_ps_delete, check_push_pull,
          check_errors, check_openai_chat, check_openai_completions_embeddings_models,
          check_openai_responses, check_anthropic_messages]

if __name__ == "__main__":
    print(f"ollama {ollama.__version__ if hasattr(ollama, '__version__') else '?'}, openai {openai.__version__}")
    for check in CHECKS:
        try:
            check()
        except Exception:
            print(f"FAIL {check.__name__}")
            traceback.print_exc()
            sys.exit(1)
        print(f"ok   {check.__name__}")
