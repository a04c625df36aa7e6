"""Tool calls through the openai client (a scripted model emits a known tool call), metrics, logprobs,
timeouts, and SIGTERM draining a real `k3 serve` process."""

import json
import signal
import subprocess
import sys
import time

import httpx
import openai
import pytest

from k3.defaults import default_model
from k3.engine import LLM
from k3.testing.serving import free_port
from serve_helpers import MODEL, TOOLS, serving, wait_until_idle



def test_tool_call_round_trip(tool_server):
    client = openai.OpenAI(base_url=tool_server + "/v1", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=300)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris", "days": 2}
    assert choice.message.model_extra["reasoning_content"] == "Look it up."
    # Send the call and its result back: the next prompt renders both (tool result matched by id).
    follow = messages + [choice.message.model_dump(exclude_none=True),
                         {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    again = client.chat.completions.create(model=MODEL, messages=follow, tools=TOOLS, max_tokens=300)
    assert again.choices[0].message.tool_calls[0].function.name == "get_weather"


def test_streamed_tool_call_deltas_assemble(tool_server):
    client = openai.OpenAI(base_url=tool_server + "/v1", api_key="none", max_retries=0)
    name, args, reason = "", "", None
    for chunk in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "?"}], tools=TOOLS,
                                                max_tokens=300, stream=True):
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                name += tc.function.name or ""
                args += tc.function.arguments or ""
            reason = c.finish_reason or reason
    assert name == "get_weather" and json.loads(args) == {"city": "Paris", "days": 2} and reason == "tool_calls"


@pytest.mark.parametrize("max_tokens", [3, 9, 17, 25, 40])
def test_a_stream_cut_anywhere_adds_up_to_the_non_streamed_message(tool_server, scripted_model, max_tokens):
    """Cut by max_tokens at different points: the streamed chunks (parser closing events included) give
    exactly the reasoning, content and argument text of the non-streamed answer."""
    model, _ = scripted_model
    client = openai.OpenAI(base_url=tool_server + "/v1", api_key="none", max_retries=0)
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "?"}], tools=TOOLS, max_tokens=max_tokens)
    model.step = 0
    whole = client.chat.completions.create(**kw).choices[0].message
    model.step = 0
    reasoning, content, args = "", "", ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            reasoning += (c.delta.model_extra or {}).get("reasoning_content") or ""
            content += c.delta.content or ""
            args += "".join(tc.function.arguments or "" for tc in c.delta.tool_calls or [])
    assert reasoning == (whole.model_extra.get("reasoning_content") or "")
    assert content == (whole.content or "")
    assert args == "".join(tc.function.arguments for tc in whole.tool_calls or [])
    model.step = 0


def test_metrics_and_chat_logprobs(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 4 and all(len(t.top_logprobs) == 3 for t in content)
    assert all(t.logprob == max(x.logprob for x in t.top_logprobs) for t in content)   # greedy
    streamed = []
    for chunk in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=4, temperature=0, logprobs=True, top_logprobs=3,
                                                stream=True):
        for c in chunk.choices:
            streamed += c.logprobs.content if c.logprobs and c.logprobs.content else []
    assert [t.token for t in streamed] == [t.token for t in content]
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in content])
    text = httpx.get(base + "/metrics").text
    for name in ("k3_requests_total", "k3_time_to_first_token_seconds_bucket", "k3_inter_token_latency_seconds_count",
                 "k3_generation_tokens_total", "k3_queue_depth", "k3_running_sequences", "k3_kda_slots_used"):
        assert name in text


def test_request_timeout_is_504():
    llm = LLM(str(default_model()), cache_memory="8MiB")
    with serving(llm, request_timeout=0.05) as url:
        r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 500,
                                                      "ignore_eos": True})
        assert r.status_code == 504 and r.json()["error"]["type"] == "timeout"
        assert wait_until_idle(llm)["running"] == 0


def test_stream_past_the_timeout_ends_with_an_error_event():
    llm = LLM(str(default_model()), cache_memory="8MiB")
    with serving(llm, request_timeout=0.3) as url:
        with httpx.stream("POST", url + "/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 3000,
                "ignore_eos": True, "stream": True}) as r:
            lines = [line for line in r.iter_lines() if line]
        assert any('"type": "timeout"' in line for line in lines) and lines[-1] == "data: [DONE]"
        assert wait_until_idle(llm)["running"] == 0


def _wait_healthy(proc, port: int, seconds: float = 60.0) -> None:
    """Until /health answers; fails loudly, with the server's output, if it never does."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"k3 serve exited ({proc.returncode}) before it was ready:\n{proc.stdout.read().decode()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    pytest.fail(f"k3 serve never answered /health on port {port}:\n{proc.stdout.read().decode()[-2000:]}")


def test_sigterm_finishes_in_flight_requests_then_exits(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "k3.cli.main", "serve", "--port", str(port),
                             "--cache-memory", "16MiB"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(proc, port)
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", timeout=60, json={
                "model": MODEL, "prompt": "It was", "max_tokens": 40, "ignore_eos": True, "stream": False}) as r:
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            with pytest.raises(httpx.TransportError):   # no longer accepting while it drains
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            body = json.loads(r.read())
        assert body["usage"]["completion_tokens"] == 40   # the in-flight request finished
        # uvicorn drains, then re-raises the signal: exit status 0 or -SIGTERM, and promptly.
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        proc.kill()
