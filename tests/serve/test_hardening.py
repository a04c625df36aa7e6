"""The server's answers to what an outside audit sent it (issue 17): strict validation as 400s, a body
limit that chunked bodies cannot bypass, a maximum context, aborts when the client leaves, a key on
every route, streamed completions, an early port check, and ids the tokenizer cannot decode."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from k3.chat.tokenizer import K3Tokenizer
from k3.engine import LLM, SamplingParams
from k3.defaults import default_model
from k3.testing.serving import free_port
from serve_helpers import MODEL, serving, wait_until_idle

USER = [{"role": "user", "content": "Hello"}]
DEEP = '{"type": "object", "properties": {"x": ' * 450 + "{}" + "}}" * 450       # JSON nested 900 deep
DEEPER = "[" * 5000 + "]" * 5000                                                  # past json's own recursion limit


def _chat(base, **body):
    """POST a chat request; values given as Raw(text) are spliced in as JSON text (too deep to encode)."""
    text = json.dumps({"model": MODEL, "messages": USER, "max_tokens": 2} | body)
    for key, raw in RAW.items():
        text = text.replace(json.dumps(key), raw)
    return httpx.post(base + "/v1/chat/completions", content=text, headers={"content-type": "application/json"},
                      timeout=30)


RAW = {"<DEEP>": DEEP, "<DEEPER>": DEEPER}


@pytest.mark.parametrize("body,says", [
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": "f"}},
     "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "<DEEP>"}}]}, "nested more than"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "<DEEPER>"}}]}, "body"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"name": 7}}]}, "name"),
    ({"messages": [{"role": "user", "content": None}]}, "content"),
    ({"messages": [*USER, {"role": "assistant", "content": "x", "reasoning_content": 5}, *USER]}, "reasoning_content"),
    ({"ignore_eos": "yes"}, "ignore_eos"),
    ({"n": "2"}, "n"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": "<DEEP>"}}}, "nested more than"),
])
def test_invalid_requests_are_400s_with_an_openai_body(base, body, says):
    r = _chat(base, **body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] == "invalid_request_error" and says in err["message"] + str(err["param"])
    assert httpx.get(base + "/health").json()["status"] == "ok"


def test_chunked_body_without_length_is_cut_at_the_limit(base):
    def chunks():
        for _ in range(10):
            yield b" " * (1 << 20)

    r = httpx.post(base + "/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"},
                   timeout=30)
    assert r.status_code == 413 and r.json()["error"]["code"] == 413


def test_maximum_context_is_enforced_before_tokenizing(own_llm):
    with serving(own_llm, max_model_len=64) as url:
        long = _chat(url, messages=[{"role": "user", "content": "word " * 70}])
        assert long.status_code == 400 and "maximum context length is 64" in long.json()["error"]["message"]
        asked = _chat(url, max_tokens=60)
        assert asked.status_code == 400 and asked.json()["error"]["param"] == "max_tokens"
        t0 = time.monotonic()
        huge = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x" * (3 << 20)}, timeout=30)
        assert huge.status_code == 400 and "cannot fit" in huge.json()["error"]["message"]
        assert time.monotonic() - t0 < 5
        fine = _chat(url)
        assert fine.status_code == 200 and fine.json()["usage"]["total_tokens"] <= 64
        assert httpx.post(url + "/tokenize", json={"prompt": "hi"}).json()["max_model_len"] == 64


def test_a_non_streamed_request_is_aborted_when_its_client_leaves(base, llm):
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(base + "/v1/chat/completions", timeout=1.0,
                   json={"model": MODEL, "messages": USER, "max_tokens": 3000, "ignore_eos": True})
    stats = wait_until_idle(llm, seconds=5)
    assert stats["running"] == 0 and stats["waiting"] == 0, stats


def test_every_route_but_health_needs_the_key(own_llm):
    with serving(own_llm, api_key="s3cret") as url:
        for method, path, body in (("GET", "/", None), ("GET", "/metrics", None), ("GET", "/openapi.json", None),
                                   ("POST", "/tokenize", {"prompt": "x"}), ("POST", "/detokenize", {"tokens": [1]}),
                                   ("GET", "/v1/models", None)):
            r = httpx.request(method, url + path, json=body)
            assert r.status_code == 401, (path, r.status_code)
            ok = httpx.request(method, url + path, json=body, headers={"authorization": "Bearer s3cret"})
            assert ok.status_code == 200, (path, ok.status_code)
        assert httpx.get(url + "/health").status_code == 200
        assert httpx.get(url + "/?api_key=s3cret").status_code == 200
    with serving(own_llm, api_key="s3cret", public_metrics=True) as url:
        assert httpx.get(url + "/metrics").status_code == 200
        assert httpx.post(url + "/tokenize", json={"prompt": "x"}).status_code == 401


def test_completions_stream_sse_that_adds_up_to_the_plain_answer(base):
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    plain = httpx.post(base + "/v1/completions", json=body, timeout=30).json()
    with httpx.stream("POST", base + "/v1/completions", json=body | {"stream": True,
                      "stream_options": {"include_usage": True}}, timeout=30) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text == plain["choices"][0]["text"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["usage"] == plain["usage"]


def test_a_port_in_use_is_reported_before_the_model_loads():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "k3.cli.main", "serve", "--port", str(port)], capture_output=True,
                           text=True, timeout=120)
    assert r.returncode != 0 and f"cannot listen on 127.0.0.1:{port}" in r.stderr and "--port" in r.stderr
    assert "Traceback" not in r.stderr and " on http://" not in r.stderr   # it never got to loading the model
    assert time.monotonic() - t0 < 60


def test_ids_the_tokenizer_cannot_decode_are_never_sampled():
    """A checkpoint whose vocab_size (4096) exceeds its tokenizer's (256 bytes + specials)."""
    small = K3Tokenizer({bytes([b]): b for b in range(256)})
    llm = LLM(str(default_model()), tokenizer=small, cache_memory="32MiB", max_num_seqs=4)
    assert llm.engine.usable_vocab == small.vocab_size < llm.engine.vocab_size
    params = [SamplingParams(max_tokens=48, temperature=1.5, seed=s, ignore_eos=True) for s in range(4)]
    outs = llm.generate([[1, 2, 3]] * 4, params)
    assert all(o.finish_reason == "length" for o in outs), [o.error for o in outs]
    assert max(t for o in outs for t in o.token_ids) < small.vocab_size
    with pytest.raises(ValueError, match="token ids must be integers"):
        llm.generate([[small.vocab_size + 5]], SamplingParams(max_tokens=1))


def test_sigterm_exits_within_the_shutdown_timeout_with_requests_alive():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "k3.cli.main", "serve", "--port", str(port), "--cache-memory",
                             "16MiB", "--shutdown-timeout", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        from test_server_tools_and_ops import _wait_healthy
        _wait_healthy(proc, port)
        url = f"http://127.0.0.1:{port}/v1/completions"
        body = {"model": MODEL, "prompt": "It was", "max_tokens": 10000, "ignore_eos": True}

        def stay():
            try:
                httpx.post(url, json=body, timeout=60)
            except httpx.HTTPError:
                pass

        gone = threading.Thread(target=lambda: _leave(url, body))
        staying = threading.Thread(target=stay, daemon=True)
        gone.start()
        staying.start()
        gone.join()
        time.sleep(0.5)
        assert staying.is_alive()            # its 10,000 tokens are far from done
        t0 = time.monotonic()
        proc.terminate()
        proc.wait(timeout=20)
        assert time.monotonic() - t0 < 12
    finally:
        proc.kill()


def _leave(url, body):
    try:
        httpx.post(url, json=body, timeout=0.5)
    except httpx.HTTPError:
        pass


def test_a_second_driver_for_one_engine_is_refused(base, llm):
    from k3.serve.async_engine import AsyncEngine

    with pytest.raises(RuntimeError, match="already driven by another AsyncEngine"):
        AsyncEngine(llm.engine)
    with pytest.raises(RuntimeError, match="driven by a server"):
        llm.generate([[1, 2]])
