"""Structured outputs at their edges (issue 44): a user's grammar, regex and choice pass through as the library
reads them alone; limits and unsatisfiable schemas are clear errors before any token; numbers stay finite in a
double; top logprobs under a constraint are finite; a tool call cut by max_tokens says so."""

import json
import math

import pytest

from k3.config.presets import tiny_chat
from k3.engine import LLM, SamplingParams
from k3.engine.structured import StructuredOutputs
from k3.engine.structured.finite import LIMIT, finite_numbers
from k3.testing import make_checkpoint


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = make_checkpoint(tmp_path_factory.mktemp("edges"), tiny_chat(), seed=3, tokenizer=True)
    return LLM(str(path), cache_memory="32MiB", max_num_seqs=16)


def _texts(llm, so: StructuredOutputs, seeds=range(6), max_tokens=60, prompt="Say:") -> list[str]:
    """The finished outputs (at least half of them must finish)."""
    params = [SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=s, structured_outputs=so) for s in seeds]
    outs = llm.generate([prompt] * len(params), params)
    done = [o.text for o in outs if o.finish_reason == "stop"]
    assert 2 * len(done) >= len(outs), [(o.finish_reason, o.text) for o in outs]
    return done


@pytest.mark.parametrize("grammar,allowed", [
    ('start: "start" | "stop"', {"start", "stop"}),                      # literals that spell our rule names
    ('?start: x\nx: "a" | "b"', {"a", "b"}),                              # an inlined start rule
    ('start: body\nbody: "k" | "q"', {"k", "q"}),                         # a rule named like ours
    ('start: X\nX: /[a-c]\\/[0-2]/', {f"{a}/{d}" for a in "abc" for d in "012"}),   # `\/` in a terminal
])
def test_a_users_grammar_means_what_it_says(llm, grammar, allowed):
    assert set(_texts(llm, StructuredOutputs(grammar=grammar))) <= allowed


def test_a_regex_with_slashes_escaped_or_not(llm):
    for regex in (r"[a-c]{1,2}\/[0-9]", r"[a-c]{1,2}/[0-9]"):
        for text in _texts(llm, StructuredOutputs(regex=regex)):
            assert "/" in text and text.split("/")[0] and text.split("/")[1].isdigit(), (regex, text)


def test_a_choice_past_the_librarys_rule_limit_works(llm):
    choice = [f"item-{i}" for i in range(5000)]
    for text in _texts(llm, StructuredOutputs(choice=choice)):
        assert text in choice
    assert set(_texts(llm, StructuredOutputs(choice=["a", "ab", "abc"]), seeds=range(12))) <= {"a", "ab", "abc"}


def test_a_choice_past_k3s_cap_is_an_error_naming_it():
    with pytest.raises(ValueError, match="20,000"):
        StructuredOutputs(choice=[f"c{i}" for i in range(20_001)])


@pytest.mark.parametrize("schema", [
    {"$ref": "#/$defs/a", "$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
                                          "required": ["x"], "additionalProperties": False}}},
    {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
])
def test_an_unsatisfiable_recursive_schema_is_refused_before_a_token(llm, schema):
    for so in (StructuredOutputs(json=schema), StructuredOutputs(json=schema, frame="think")):
        with pytest.raises(ValueError, match="no output can satisfy"):
            llm.generate(["x"], SamplingParams(max_tokens=8, structured_outputs=so))
    if "$defs" in schema:   # as a tool's parameters (behind free text, where only the probe of each tool sees it)
        with pytest.raises(ValueError, match="no output can satisfy"):
            llm.chat([{"role": "user", "content": "x"}], SamplingParams(max_tokens=8), tool_choice="required",
                     tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}])


@pytest.mark.parametrize("schema", [{"type": "number"}, {"type": "object"}, {"type": "array"}, {},
                                    {"type": "object", "properties": {"n": {"type": ["number", "null"]}}}])
def test_numbers_are_finite_in_a_double(llm, schema):
    def numbers(v):
        if isinstance(v, dict):
            return [x for w in v.values() for x in numbers(w)]
        if isinstance(v, list):
            return [x for w in v for x in numbers(w)]
        return [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else []

    for text in _texts(llm, StructuredOutputs(json=schema), seeds=range(8), max_tokens=300):
        for n in numbers(json.loads(text)):
            assert math.isfinite(float(n)) and abs(n) <= LIMIT, text


def test_finite_numbers_keeps_a_schemas_own_bounds_and_closed_values():
    s = finite_numbers({"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}},
                        "additionalProperties": False})
    assert s["properties"]["a"] == {"type": "integer", "minimum": 3, "maximum": LIMIT}
    assert s["additionalProperties"] is False
    parts = finite_numbers({"allOf": [{"type": "object", "properties": {"a": {"type": "number"}}}]})["allOf"]
    assert "additionalProperties" not in parts[0]   # an allOf branch stays open: the library intersects branches


def test_top_logprobs_under_a_constraint_are_finite(llm):
    out = llm.generate(["x"], SamplingParams(max_tokens=4, temperature=1.0, seed=0, logprobs=20,
                                             structured_outputs=StructuredOutputs(choice=["yes", "no"])))[0]
    for lp in out.logprobs:
        assert lp.top and all(math.isfinite(v) for v in lp.top.values()) and len(lp.top) < 20


def test_a_tool_call_cut_by_max_tokens_says_so(llm):
    tools = [{"type": "function", "function": {"name": "forecast", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    cut = 0
    for budget in range(18, 40, 3):
        out = llm.chat([{"role": "user", "content": "x"}], SamplingParams(max_tokens=budget, temperature=1.0, seed=1),
                       tools=tools, tool_choice="required", thinking=False)[0]
        for call in out.message.tool_calls:
            if out.output.finish_reason == "length":
                cut += 1
                assert not call.complete and isinstance(json.loads(call.arguments), dict)
                assert "tool call" in out.message.cut_warning() and any("cut off" in p for p in out.message.problems)
            else:
                assert call.complete
    assert cut, "no budget cut a call: widen the range"
