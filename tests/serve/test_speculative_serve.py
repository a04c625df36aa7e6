"""Speculative decoding through the server: streamed and whole answers are those of a plain server
(greedy), and Prometheus counts the drafts."""

import openai
import httpx

from k3.defaults import default_model
from k3.engine import LLM
from k3.testing.serving import serving

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


def _answers(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    kw = dict(model=model, max_tokens=40, temperature=0,
              messages=[{"role": "user", "content": "Say the the the the the the the the again and again."}])
    whole = client.chat.completions.create(**kw).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw)
                       if c.choices)
    return whole, streamed, httpx.get(url + "/metrics").text


def _metric(text, name):
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_answers_equal_a_plain_servers_and_drafts_are_counted():
    with serving(LLM(str(default_model()), cache_memory="64MiB", speculative_config=NGRAM)) as url:
        spec = _answers(url)
    with serving(LLM(str(default_model()), cache_memory="64MiB")) as url:
        plain = _answers(url)
    assert spec[0] == spec[1] == plain[0] == plain[1]
    drafted, accepted = (_metric(spec[2], f"k3_spec_decode_num_{n}_total") for n in ("draft_tokens", "accepted_tokens"))
    assert 0 < accepted <= drafted
    assert _metric(spec[2], "k3_spec_decode_num_drafts_total") > 0
    assert _metric(plain[2], "k3_spec_decode_num_draft_tokens_total") == 0
