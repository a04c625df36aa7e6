"""The server's part of the third hardening round (issue 69): a streamed request whose client leaves while
it waits its turn is aborted before it is prefilled; a request of more choices than the queue has places
runs them in turns instead of a 429 no retry can cure; request fields that would change the prompt's
meaning (unknown chat_template_kwargs, vLLM's template fields, tool names outside OpenAI's rule) are 400s."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from k3.defaults import default_model
from k3.engine import LLM
from k3.engine.engine import LLMEngine
from serve_helpers import MODEL, serving, wait_until_idle

USER = [{"role": "user", "content": "Hi"}]
OFF = {"thinking": False}
LONG = 3000          # tokens of the request that holds the one sequence slot while others queue


@pytest.fixture(scope="module")
def llm():
    return LLM(str(default_model()), max_num_seqs=1, cache_memory="64MiB")


@pytest.fixture(scope="module")
def base(llm):
    with serving(llm, max_queued=2) as url:
        yield url


def _chat(base, timeout=120, **body):
    body = {"model": MODEL, "messages": USER, "max_tokens": 4, "chat_template_kwargs": OFF} | body
    return httpx.post(base + "/v1/chat/completions", json=body, timeout=timeout)


@pytest.mark.parametrize("body,param", [
    ({"chat_template_kwargs": {"foo": 1}}, "chat_template_kwargs"),
    ({"chat_template_kwargs": {"chat_template": "{{ messages }}"}}, "chat_template_kwargs"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs"),
    ({"chat_template": "{{ messages }}"}, "chat_template"),
    ({"add_generation_prompt": False}, "add_generation_prompt"),
    ({"continue_final_message": True}, "continue_final_message"),
])
def test_template_fields_k3_would_ignore_are_400s(base, body, param):
    r = _chat(base, **body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.parametrize("name", ["get\x1b[2Jweather", "get\nweather", "a.b", "ns:tool", "", "x" * 65, "wé"])
def test_tool_names_outside_openais_rule_are_400s(base, name):
    tools = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}]
    r = _chat(base, tools=tools)
    assert r.status_code == 400 and ("tool names are 1-64 characters" in r.text or "non-empty" in r.text), r.text
    history = USER + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert _chat(base, messages=history).status_code == 400


def test_ordinary_tool_names_and_thinking_keys_stay_accepted(base):
    tools = [{"type": "function", "function": {"name": "get_weather-2", "parameters": {"type": "object"}}}]
    r = _chat(base, tools=tools, chat_template_kwargs={"thinking": False, "enable_thinking": False})
    assert r.status_code == 200, r.text


def _hold_the_slot(base, llm):
    """A long request in the background; returns once it runs (the one slot is taken)."""
    worker = threading.Thread(target=_chat, args=(base,), kwargs={"max_tokens": LONG, "ignore_eos": True})
    worker.start()
    for _ in range(400):
        if llm.engine.stats_snapshot()["running"] == 1:
            return worker
        time.sleep(0.01)
    raise AssertionError("the long request never started")


def test_a_streamed_request_whose_client_leaves_while_queued_is_never_prefilled(base, llm, monkeypatch):
    added, aborted = [], []
    real_add, real_abort = LLMEngine.add_request, LLMEngine.abort
    monkeypatch.setattr(LLMEngine, "add_request", lambda self, *a, **k: added.append(real_add(self, *a, **k))
                        or added[-1])
    monkeypatch.setattr(LLMEngine, "abort", lambda self, rid: (aborted.append((rid, rid in self.requests)),
                                                               real_abort(self, rid))[1])
    wait_until_idle(llm)
    before = llm.engine.stats()["generated_tokens"]
    worker = _hold_the_slot(base, llm)
    for _ in range(2):
        with pytest.raises(httpx.TimeoutException):      # the client gives up while its request waits
            with httpx.stream("POST", base + "/v1/chat/completions", timeout=1.0, json={
                    "model": MODEL, "messages": USER, "max_tokens": 20, "stream": True, "chat_template_kwargs": OFF}):
                pass
    time.sleep(0.5)                                      # the server notices within its poll (0.2 s)
    assert llm.engine.stats_snapshot()["running"] == 1, "the long request ended too soon to test anything"
    worker.join()
    generated = wait_until_idle(llm)["generated_tokens"] - before
    assert generated == LONG, f"{generated - LONG} tokens were generated for clients that had left"
    departed = added[1:]
    assert len(departed) == 2 and all((rid, True) in aborted for rid in departed)


@pytest.mark.parametrize("stream", [False, True])
def test_more_choices_than_queue_places_run_in_turns(base, llm, stream):
    """max_queued is 2: n=5 used to be a 429 that no retry could cure."""
    r = _chat(base, n=5, max_tokens=6, temperature=1.0, seed=1, stream=stream)
    assert r.status_code == 200, r.text
    if stream:
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        ends = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks
                if c["choices"] and c["choices"][0]["finish_reason"]}
    else:
        ends = {c["index"]: c["finish_reason"] for c in r.json()["choices"]}
    assert ends == {i: "length" for i in range(5)}
    assert wait_until_idle(llm)["running"] == 0 and _chat(base).status_code == 200   # every place given back
