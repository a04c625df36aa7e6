"""Structured outputs on a random-weight model (whose free output is noise): every constrained answer
parses and validates, for hand-written and hypothesis-generated schemas; chat framing, regexes,
choices and grammars; unconstrained batchmates are unaffected; errors name the problem."""

import json

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from k3.config.presets import tiny_chat
from k3.engine import LLM, SamplingParams
from k3.engine.structured import StructuredOutputs
from k3.testing import make_checkpoint


def _obj(props: dict, required=None, **kw) -> dict:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": False, **kw}


S = {"type": "string", "maxLength": 8}
SCHEMAS = [
    {"type": "integer", "minimum": -5, "maximum": 5},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "boolean"},
    {"type": "null"},
    {"enum": ["red", "green", "blue"]},
    {"const": "fixed"},
    S,
    {"type": "string", "pattern": "^[a-z]{2,4}$"},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 4},
    {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 0},
    _obj({"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    _obj({"a": S, "b": {"type": "boolean"}}, required=["a"]),
    _obj({"a": _obj({"b": _obj({"c": _obj({"d": {"type": "integer", "minimum": 0, "maximum": 3}})})})}),
    _obj({"tags": {"type": "array", "items": S, "minItems": 1, "maxItems": 3}, "n": {"type": "integer",
                                                                                        "maximum": 50, "minimum": 1}}),
    _obj({"kind": {"enum": ["cat", "dog"]}, "legs": {"type": "integer", "minimum": 2, "maximum": 4}}),
    _obj({"x": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "null"}]}}),
    _obj({"x": {"type": "number", "exclusiveMinimum": 0, "maximum": 10}}),
    _obj({"items": {"type": "array", "items": _obj({"id": {"type": "integer", "minimum": 0, "maximum": 99},
                                                     "ok": {"type": "boolean"}}), "minItems": 1, "maxItems": 2}}),
    _obj({"a": {"type": "string", "enum": ["x", "y"]}, "b": {"type": ["integer", "null"], "minimum": 0,
                                                              "maximum": 5}}),
    {"type": "object", "$defs": {"p": _obj({"v": {"type": "integer", "minimum": 0, "maximum": 9}})},
     "properties": {"first": {"$ref": "#/$defs/p"}, "second": {"$ref": "#/$defs/p"}},
     "required": ["first", "second"], "additionalProperties": False},
    _obj({}, required=[]),
    _obj({"q": {"type": "integer", "minimum": 0, "maximum": 100, "multipleOf": 5}}),
]


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = make_checkpoint(tmp_path_factory.mktemp("chat"), tiny_chat(), seed=2, tokenizer=True)
    return LLM(str(path), cache_memory="32MiB", max_num_seqs=16)


def _valid(schema, text) -> bool:
    return jsonschema_rs.validator_for(schema).is_valid(json.loads(text))


def test_every_schema_parses_and_validates(llm):
    params = [SamplingParams(max_tokens=400, temperature=1.0, seed=i, structured_outputs=StructuredOutputs(json=s))
              for i, s in enumerate(SCHEMAS)]
    outs = llm.generate(["Answer:"] * len(SCHEMAS), params)
    assert len(SCHEMAS) >= 20
    for schema, out in zip(SCHEMAS, outs):
        assert out.finish_reason == "stop", (schema, out.text, out.warning)
        assert _valid(schema, out.text), (schema, out.text)


def _schemas(depth: int = 3):
    leaf = st.one_of(
        st.builds(lambda lo, n: {"type": "integer", "minimum": lo, "maximum": lo + n}, st.integers(-50, 50),
                  st.integers(0, 20)),
        st.just({"type": "boolean"}),
        st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 6)),
        st.lists(st.sampled_from(["a", "b", "c", 1, 2, None]), min_size=1, max_size=4, unique=True).map(
            lambda v: {"enum": v}))
    if depth == 0:
        return leaf
    inner = _schemas(depth - 1)
    return st.one_of(
        leaf,
        st.builds(lambda items, lo, extra: {"type": "array", "items": items, "minItems": lo, "maxItems": lo + extra},
                  inner, st.integers(0, 2), st.integers(0, 2)),
        st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), inner, min_size=1, max_size=3).flatmap(
            lambda props: st.lists(st.sampled_from(sorted(props)), unique=True).map(
                lambda req: _obj(props, required=req))))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(schema=_schemas(), seed=st.integers(0, 10 ** 6))
def test_generated_schemas_parse_and_validate(llm, schema, seed):
    out = llm.generate(["Data:"], SamplingParams(max_tokens=400, temperature=1.0, seed=seed,
                                                  structured_outputs=StructuredOutputs(json=schema)))[0]
    assert out.finish_reason == "stop", (schema, out.text)
    assert _valid(schema, out.text), (schema, out.text)


def test_regex_choice_grammar_and_json_object(llm):
    cases = [(StructuredOutputs(regex=r"[0-9]{3}-[a-z]{2}"), lambda t: len(t) == 6 and t[3] == "-"),
             (StructuredOutputs(choice=["alpha", "beta", "gamma"]), lambda t: t in ("alpha", "beta", "gamma")),
             (StructuredOutputs(grammar='start: "(" num ("," num)* ")"\nnum: /[0-9]{1,2}/'),
              lambda t: t.startswith("(") and t.endswith(")")),
             (StructuredOutputs(json_object=True), lambda t: isinstance(json.loads(t), dict))]
    for so, ok in cases:
        out = llm.generate(["x"], SamplingParams(max_tokens=300, temperature=1.0, seed=9, structured_outputs=so))[0]
        assert out.finish_reason == "stop" and ok(out.text), (so, out.text)


def test_chat_answers_are_framed_xtml_with_valid_json(llm):
    schema = SCHEMAS[10]
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    for seed in range(3):
        out = llm.chat([{"role": "user", "content": "Who?"}], SamplingParams(max_tokens=200, temperature=1.0, seed=seed),
                       response_format=rf, thinking=False)[0]
        assert out.output.finish_reason == "stop" and not out.message.problems, out.message
        assert _valid(schema, out.message.content)


def test_thinking_stays_free_and_the_response_channel_is_constrained(llm):
    """The framing grammar over token ids: any thinking, then XTML and JSON; anything else is refused."""
    tok = llm.tokenizer
    grammars = llm.engine._grammars()

    def fits(text: str, so) -> bool:
        c = grammars.compile(so)
        ids = tok.encode(text, special=True) + [llm.engine.eos_token_id]
        return all(c.accept(t) for t in ids) and c.done

    so = StructuredOutputs(json=SCHEMAS[0], frame="think")
    tail = "<|close|>response<|sep|><|close|>message<|sep|>"
    assert fits("any thoughts at all, {not json}<|close|>think<|sep|><|open|>response<|sep|>3" + tail, so)
    assert not fits("thoughts<|close|>think<|sep|><|open|>response<|sep|>7" + tail, so)        # above maximum
    assert not fits("thoughts<|close|>think<|sep|><|open|>response<|sep|>3<|end_of_msg|>", so)  # no closing XTML
    assert fits("3" + tail, StructuredOutputs(json=SCHEMAS[0], frame="response"))


def test_unconstrained_batchmates_are_unaffected(llm):
    plain = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    alone = llm.generate(["Once upon a time"], plain)[0]
    mixed = llm.generate(["Once upon a time", "Answer:", "Answer:"],
                         [plain, SamplingParams(max_tokens=60, temperature=1.0, seed=1,
                                                structured_outputs=StructuredOutputs(json=SCHEMAS[10])),
                          SamplingParams(max_tokens=60, temperature=0.7, seed=2,
                                         structured_outputs=StructuredOutputs(choice=["x", "y"]))])
    assert mixed[0].token_ids == alone.token_ids
    assert _valid(SCHEMAS[10], mixed[1].text) and mixed[2].text in ("x", "y")


def test_a_constraint_cut_by_max_tokens_ends_with_length_and_says_so(llm):
    out = llm.generate(["x"], SamplingParams(max_tokens=3, temperature=1.0, seed=0,
                                             structured_outputs=StructuredOutputs(json=SCHEMAS[10])))[0]
    assert out.finish_reason == "length" and "max_tokens" in out.warning


@pytest.mark.parametrize("so,match", [
    (dict(json={"type": "object", "dependentSchemas": {"a": {}}}, exact=True), "Unimplemented keys"),
    (dict(json={"type": "object", "properties": 5}), "properties must be an object"),
    (dict(regex="("), "structured_outputs"),
    (dict(json={"type": "integer"}, regex="a"), "exactly one"),
    (dict(choice=[]), "choice"),
    (dict(grammar="rule: \"a\""), "start"),
])
def test_bad_constraints_are_clear_errors(llm, so, match):
    with pytest.raises(ValueError, match=match):
        llm.generate(["x"], SamplingParams(max_tokens=4, structured_outputs=StructuredOutputs(**so)))


def test_constrained_decoding_needs_a_tokenizer(tiny_checkpoint):
    with pytest.raises(ValueError, match="needs the engine's tokenizer"):
        LLM(tiny_checkpoint, cache_memory="8MiB").generate(
            [[1, 2]], SamplingParams(max_tokens=4, structured_outputs=StructuredOutputs(choice=["a"])))


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": _obj(
            {"city": S, "days": {"type": "integer", "minimum": 1, "maximum": 7}})}},
         {"type": "function", "function": {"name": "add", "parameters": _obj(
             {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0,
                                                                            "maximum": 99}}, required=["a"])}}]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_required_and_named_tool_calls_are_valid_calls(llm, choice):
    for seed in range(4):
        out = llm.chat([{"role": "user", "content": "Go."}], SamplingParams(max_tokens=250, temperature=1.0, seed=seed),
                       tools=TOOLS, tool_choice=choice, thinking=False)[0]
        m = out.message
        assert out.output.finish_reason == "stop" and not m.problems and m.tool_calls, m
        for call in m.tool_calls:
            assert call.name in PARAMS and (choice == "required" or call.name == "get_weather")
            assert jsonschema_rs.validator_for(PARAMS[call.name]).is_valid(json.loads(call.arguments)), call


def test_auto_leaves_text_free_and_constrains_only_the_calls(llm):
    grammars = llm.engine._grammars()
    tok = llm.tokenizer
    so = StructuredOutputs.from_tools(TOOLS, "auto", "think")

    def fits(text):
        c = grammars.compile(so)
        return all(c.accept(t) for t in tok.encode(text, special=True) + [llm.engine.eos_token_id]) and c.done

    think = "hmm<|close|>think<|sep|><|open|>response<|sep|>"
    tail = "<|close|>message<|sep|>"
    call = '<|open|>call tool="add" index="1"<|sep|><|open|>json type="object"<|sep|>{ARGS}<|close|>json<|sep|><|close|>call<|sep|>'
    tools = "<|open|>tools<|sep|>{CALLS}<|close|>tools<|sep|>"
    assert fits(think + "any text at all, even {unbalanced" + "<|close|>response<|sep|>" + tail)
    ok = tools.replace("{CALLS}", call.replace("{ARGS}", '{"a": 3, "b": 4}'))
    assert fits(think + "sure<|close|>response<|sep|>" + ok + tail)
    for bad in ('{"a": 300}', '{"b": 1}', '{"a": 1, "c": 2}'):   # out of range, missing required, unknown key
        assert not fits(think + "<|close|>response<|sep|>" + tools.replace("{CALLS}", call.replace("{ARGS}", bad)) + tail)
    assert not fits(think + "<|close|>response<|sep|>" + tools.replace("{CALLS}", call.replace("add", "rm").replace(
        "{ARGS}", "{}")) + tail)   # a tool that was not offered
    # The renderer's own form, one XTML block per argument (raw text for strings, JSON otherwise).
    xcall = ('<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>{CITY}'
             '<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>{DAYS}<|close|>argument<|sep|>'
             '<|close|>call<|sep|>')
    for city, days, ok in (("Paris", "2", True), ("Paris", "9", False), ("far too long a name", "2", False)):
        text = think + "<|close|>response<|sep|>" + tools.replace("{CALLS}", xcall.replace("{CITY}", city).replace(
            "{DAYS}", days)) + tail
        assert fits(text) is ok, (city, days)


def test_constrained_requests_are_drafted_and_verified_against_the_mask(tmp_path_factory):
    """A draft model that is the target itself: greedy drafts are the target's own choices, so every window
    accepts what the grammar allows; the output equals plain constrained decoding token for token."""
    path = make_checkpoint(tmp_path_factory.mktemp("chat-spec-c"), tiny_chat(), seed=2, tokenizer=True)
    spec = LLM(str(path), cache_memory="32MiB", speculative_config={
        "method": "draft_model", "model": str(path), "num_speculative_tokens": 3})
    plain = LLM(str(path), cache_memory="32MiB")
    for so in (StructuredOutputs(json=SCHEMAS[13]), StructuredOutputs(regex="[a-z]{3,9}( [a-z]{2,5}){2,4}")):
        params = SamplingParams(max_tokens=120, temperature=0.0, structured_outputs=so)
        got, want = spec.generate(["Answer:"], params)[0], plain.generate(["Answer:"], params)[0]
        assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason == "stop"
    stats = spec.engine.stats()
    assert stats["spec_drafted_tokens"] > 0 and stats["spec_accepted_tokens"] > 0


def test_with_speculative_decoding_n_and_logprobs(tmp_path_factory):
    """Constrained requests beside unconstrained ones under speculative decoding; several choices, logprobs."""
    path = make_checkpoint(tmp_path_factory.mktemp("chat-spec"), tiny_chat(), seed=2, tokenizer=True)
    spec = LLM(str(path), cache_memory="32MiB", speculative_config={
        "method": "draft_model", "model": str(path), "num_speculative_tokens": 3})
    plain = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    outs = spec.generate(["Once", "Answer:", "Answer:"],
                         [plain] + [SamplingParams(max_tokens=300, temperature=1.0, seed=s, logprobs=2,
                                                   structured_outputs=StructuredOutputs(json=SCHEMAS[13]))
                                    for s in (1, 2)])
    assert outs[0].token_ids == LLM(str(path), cache_memory="32MiB").generate(["Once"], plain)[0].token_ids
    for o in outs[1:]:
        assert o.finish_reason == "stop" and _valid(SCHEMAS[13], o.text)
        assert [lp.token_id for lp in o.logprobs] == o.token_ids
    assert outs[1].text != outs[2].text
    assert spec.engine.stats()["spec_accepted_tokens"] > 0
