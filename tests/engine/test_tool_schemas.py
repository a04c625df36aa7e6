"""Every tool call that finishes validates against its tool's whole JSON schema, in whichever form K3's format
lets the model write the arguments (one JSON block, or XTML per argument where that form is exact): over a
hand-picked corpus of real-world schemas and hypothesis-generated ones, several seeds, on a random-weight
model (whose free choices are noise, so it tries every form the grammar offers)."""

import json

import jsonschema
import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from k3.config.presets import tiny_chat
from k3.engine import LLM, SamplingParams
from k3.engine.structured import StructuredOutputs
from k3.engine.structured.patterns import FORMATS, ascii_classes
from k3.engine.structured.tool_args import xtml_arguments
from k3.testing import make_checkpoint
from tool_schema_corpus import CORPUS

SEEDS = range(3)


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = make_checkpoint(tmp_path_factory.mktemp("tools"), tiny_chat(), seed=2, tokenizer=True)
    return LLM(str(path), cache_memory="64MiB", max_num_seqs=16)


def _tool(name: str, params: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": params}}


def _calls(llm, tools: list[dict], seeds, choice="required", max_tokens=400) -> list:
    """(tool name, arguments text, finish reason, problems) of every call, one conversation per seed."""
    convs = [[{"role": "user", "content": "Call a tool."}]] * len(seeds)
    params = [SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=s) for s in seeds]
    outs = llm.chat(convs, params, tools=tools, tool_choice=choice, thinking=False)
    return [(c.name, c.arguments, o.output.finish_reason, o.message.problems)
            for o in outs for c in o.message.tool_calls or [None] if c is not None] or outs


def _validates(schema, value) -> bool:
    """Both validators, formats checked: jsonschema-rs, and Python's jsonschema (whose date is the stdlib's)."""
    checker = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return jsonschema_rs.validator_for(schema, validate_formats=True).is_valid(value) and checker.is_valid(value)


def _invalid(tools: list[dict], calls) -> list:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    bad = []
    for name, args, finish, problems in calls:
        if finish != "stop":
            continue   # cut by max_tokens: not a finished call
        ok = name in schemas and not problems and _validates(schemas[name], json.loads(args))
        if not ok:
            bad.append((name, args, problems))
    return bad


@pytest.mark.parametrize("name,params", CORPUS, ids=[n for n, _ in CORPUS])
def test_every_finished_call_validates_against_the_whole_schema(llm, name, params):
    tools = [_tool(name, params)]
    calls = _calls(llm, tools, SEEDS)
    assert calls and all(isinstance(c, tuple) for c in calls), calls
    assert sum(c[2] == "stop" for c in calls) >= 1, calls   # the budget is enough to finish
    assert _invalid(tools, calls) == []


def test_all_corpus_tools_offered_at_once(llm):
    tools = [_tool(n, p) for n, p in CORPUS]
    calls = _calls(llm, tools, range(4), choice="required", max_tokens=600)
    assert _invalid(tools, calls) == []


def test_the_per_argument_form_is_offered_only_where_it_is_exact():
    forms = {n: xtml_arguments("x", p, {}) is not None for n, p in CORPUS}
    assert forms["plain_strings"] and forms["const_string"] and forms["const_untyped"] and forms["numbers"]
    for name in ("ref_at_top", "any_of_at_top", "all_of_at_top", "min_properties", "required_not_in_properties",
                 "formats", "max_length_and_pattern", "ascii_digits", "escaped_keys", "enum_mixed", "type_list"):
        assert not forms[name], name


def test_json_schema_digit_and_word_classes_are_ascii():
    assert ascii_classes(r"^\d{3}\w+$") == "^[0-9]{3}[A-Za-z0-9_]+$"
    assert ascii_classes(r"[\d.]\D\W\\d") == r"[0-9.][^0-9][^A-Za-z0-9_]\\d"
    assert ascii_classes(r"[^\D]") == r"[^\D]"   # a negated class inside a class has no plain spelling


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_formats_are_held_to_what_validators_accept(llm, fmt):
    schema = {"type": "string", "format": fmt}
    params = [SamplingParams(max_tokens=120, temperature=1.0, seed=s,
                             structured_outputs=StructuredOutputs(json=schema)) for s in range(12)]
    values = [json.loads(o.text) for o in llm.generate(["Value:"] * 12, params) if o.finish_reason == "stop"]
    assert len(values) >= 8 and all(_validates(schema, v) for v in values), values
    with_pattern = {**schema, "pattern": "^[0-9a-z]"}   # a pattern of its own as well: both hold
    c = llm.engine._grammars().compile(StructuredOutputs(json=with_pattern))
    assert c is not None


def test_a_leap_day_only_in_a_leap_year():
    import re

    date = re.compile(FORMATS["date"])
    assert date.match("2024-02-29") and date.match("2000-02-29") and date.match("2023-02-28")
    assert not date.match("2023-02-29") and not date.match("1900-02-29") and not date.match("2023-04-31")
    assert not re.match(FORMATS["time"], "12:30:60Z") and re.match(FORMATS["time"], "23:59:59.25+05:30")


def _leaf():
    strings = st.one_of(
        st.builds(lambda lo, n: {"type": "string", "minLength": lo, "maxLength": lo + n}, st.integers(0, 3),
                  st.integers(0, 6)),
        st.builds(lambda p: {"type": "string", "pattern": p}, st.sampled_from(
            [r"^\d{2,4}$", r"^[a-z]+$", r"^\w{1,5}$", "^(yes|no)$", r"^[A-Z]\d$"])),
        st.builds(lambda f: {"type": "string", "format": f}, st.sampled_from(["date", "uuid", "email", "date-time"])),
        st.lists(st.text("abcxyz \"\\", min_size=1, max_size=4), min_size=1, max_size=3, unique=True).map(
            lambda v: {"enum": v}),
        st.text("abc\"<|", min_size=0, max_size=4).map(lambda v: {"const": v}))
    return st.one_of(strings, st.just({"type": "boolean"}), st.builds(
        lambda lo, n: {"type": "integer", "minimum": lo, "maximum": lo + n}, st.integers(-9, 9), st.integers(0, 9)))


@st.composite
def _tool_schemas(draw):
    keys = draw(st.lists(st.text("ab\"<>|\\ k", min_size=1, max_size=3), min_size=0, max_size=4, unique=True))
    props = {k: draw(_leaf()) for k in keys}
    required = [k for k in keys if draw(st.booleans())]
    extra = draw(st.sampled_from([{}, {"additionalProperties": False}, {"minProperties": 1},
                                  {"additionalProperties": False, "required": required + ["missing"]}]))
    schema = {"type": "object", "properties": props, "required": required, **extra}
    return {"$ref": "#/$defs/a", "$defs": {"a": schema}} if draw(st.booleans()) else schema


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(params=_tool_schemas(), seed=st.integers(0, 1000))
def test_generated_tool_schemas_validate(llm, params, seed):
    tools = [_tool("gen", params)]
    try:
        StructuredOutputs.from_tools(tools, "required", "response")
        calls = _calls(llm, tools, [seed, seed + 1])
    except ValueError as e:   # refused before any token, naming the problem: a 400, never a wrong call
        assert str(e).startswith("structured_outputs") or str(e).startswith("tools"), e
        return
    assert _invalid(tools, [c for c in calls if isinstance(c, tuple)]) == []
