"""Prefix caching through the server: a chat's second turn reuses the first's state (Prometheus
counters say so) and answers exactly as a server without the cache."""

import httpx
import openai

from k3.defaults import default_model
from k3.engine import LLM
from k3.testing.serving import serving


def _two_turns(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "Tell me about the river in winter."}]
    kw = dict(model=model, max_tokens=12, temperature=0)
    first = client.chat.completions.create(messages=messages, **kw).choices[0].message
    messages += [{"role": "assistant", "content": first.content or ""}, {"role": "user", "content": "And summer?"}]
    second = client.chat.completions.create(messages=messages, **kw).choices[0].message
    return first.content, second.content, httpx.get(url + "/metrics").text


def _metric(text, name):
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_the_second_turn_hits_and_answers_as_without_the_cache():
    with serving(LLM(str(default_model()), cache_memory="64MiB")) as url:
        on = _two_turns(url)
    with serving(LLM(str(default_model()), cache_memory="64MiB", enable_prefix_caching=False)) as url:
        off = _two_turns(url)
    assert on[:2] == off[:2]
    hits, queries = _metric(on[2], "k3_prefix_cache_hits_total"), _metric(on[2], "k3_prefix_cache_queries_total")
    assert 0 < hits < queries and _metric(on[2], "k3_prefix_cache_snapshots") > 0
    assert _metric(off[2], "k3_prefix_cache_hits_total") == 0
