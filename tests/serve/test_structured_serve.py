"""Structured outputs through the server: response_format and structured_outputs are enforced (whole
and streamed answers parse and validate), and a bad constraint is a 400 naming the field."""

import json

import httpx
import openai
import pytest

from k3.defaults import default_model
from k3.engine import LLM
from k3.testing.serving import serving

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city", "rank", "tags"],
          "properties": {"city": {"type": "string", "maxLength": 12}, "rank": {"type": "integer", "minimum": 1,
                                                                               "maximum": 9},
                         "tags": {"type": "array", "items": {"enum": ["old", "new", "big"]}, "minItems": 1,
                                  "maxItems": 2}}}


@pytest.fixture(scope="module")
def url():
    with serving(LLM(str(default_model()), cache_memory="64MiB")) as u:
        yield u


def _check(doc: dict) -> None:
    assert set(doc) == {"city", "rank", "tags"} and len(doc["city"]) <= 12 and 1 <= doc["rank"] <= 9
    assert 1 <= len(doc["tags"]) <= 2 and set(doc["tags"]) <= {"old", "new", "big"}


def test_json_schema_whole_and_streamed(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    kw = dict(model=client.models.list().data[0].id, max_tokens=120, temperature=0.8, seed=4,
              messages=[{"role": "user", "content": "Describe a city."}],
              response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}},
              extra_body={"chat_template_kwargs": {"thinking": False}})
    whole = client.chat.completions.create(**kw).choices[0]
    _check(json.loads(whole.message.content))
    assert whole.finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw)
                       if c.choices)
    assert streamed == whole.message.content


def test_completions_structured_outputs_choice_and_regex(url):
    for body, ok in (({"choice": ["red", "green", "blue"]}, lambda t: t in ("red", "green", "blue")),
                     ({"regex": "[A-Z][a-z]{2,5} [0-9]{2}"}, lambda t: t[0].isupper() and t[-2:].isdigit())):
        r = httpx.post(url + "/v1/completions", json={"model": "default", "prompt": "The answer:", "max_tokens": 20,
                                                      "temperature": 1.0, "structured_outputs": body}, timeout=60)
        assert r.status_code == 200, r.text
        assert ok(r.json()["choices"][0]["text"]), r.json()


@pytest.mark.parametrize("body,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object",
                                                                                          "properties": 5}}}},
     "response_format"),
    ({"structured_outputs": {"regex": "("}}, "structured_outputs"),
    ({"structured_outputs": {"json": {"type": "integer"}, "regex": "a"}}, "structured_outputs"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
])
def test_bad_constraints_are_400s_naming_the_field(url, body, param):
    r = httpx.post(url + "/v1/chat/completions", json={"model": "default", "max_tokens": 5,
                                                       "messages": [{"role": "user", "content": "hi"}], **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_required_tool_calls_validate_against_their_parameters(url):
    import jsonschema_rs

    params = {"type": "object", "additionalProperties": False, "required": ["city"],
              "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1,
                                                                                   "maximum": 5}}}
    tools = [{"type": "function", "function": {"name": "forecast", "parameters": params}}]
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    for seed in range(2):
        choice = client.chat.completions.create(
            model=client.models.list().data[0].id, max_tokens=600, temperature=1.0, seed=seed, tools=tools,
            tool_choice="required", messages=[{"role": "user", "content": "Forecast?"}],
            extra_body={"chat_template_kwargs": {"thinking": False}}).choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        for call in choice.message.tool_calls:
            assert call.function.name == "forecast"
            assert jsonschema_rs.validator_for(params).is_valid(json.loads(call.function.arguments))


def test_a_structured_output_cut_by_max_tokens_says_so(url):
    r = httpx.post(url + "/v1/completions", json={"model": "default", "prompt": "x", "max_tokens": 3,
                                                  "structured_outputs": {"json": SCHEMA}}, timeout=60)
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length" and "max_tokens" in choice["warning"]
