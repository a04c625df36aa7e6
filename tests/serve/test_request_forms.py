"""Every structured-output request form vLLM and SGLang users send (issue 68), through `k3 serve` with the
`openai` client: structural tags (both request places, both forms), GBNF grammars, whitespace control,
disable_additional_properties, parallel_tool_calls, strict: false, object-only tool parameters, unknown
fields named in a 400, the Responses API; and the check after generation on keywords the grammar only
approximates (uniqueItems, not, if/then/else, propertyNames, oneOf)."""

import json
import re

import jsonschema
import openai
import pytest

from k3.defaults import default_model
from k3.engine import LLM
from serve_helpers import MODEL, serving

USER = [{"role": "user", "content": "Answer."}]
OFF = {"chat_template_kwargs": {"enable_thinking": False}}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
           "additionalProperties": False}


@pytest.fixture(scope="module")
def llm():
    return LLM(str(default_model()), max_num_seqs=8, cache_memory="64MiB")


@pytest.fixture(scope="module")
def client(llm):
    with serving(llm) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=300)


def _chat(client, **kw):
    body = {"model": MODEL, "messages": USER, "max_tokens": 200, "seed": 3, "extra_body": dict(OFF)} | kw
    body["extra_body"] = {**OFF, **kw.get("extra_body", {})}
    return client.chat.completions.create(**body)


def _bad(client, says: str, **kw):
    with pytest.raises(openai.BadRequestError) as e:
        _chat(client, **kw)
    assert says in str(e.value), str(e.value)


TAG_FORMAT = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<fn="], "at_least_one": True,
              "tags": [{"begin": "<fn=weather>", "content": {"type": "json_schema", "json_schema": WEATHER},
                        "end": "</fn>"}]}}
TAG_FIRST = {"type": "structural_tag", "triggers": ["<fn="],
             "structures": [{"begin": "<fn=weather>", "schema": WEATHER, "end": "</fn>"}]}


@pytest.mark.parametrize("tag", [TAG_FORMAT, TAG_FIRST], ids=["format", "structures"])
@pytest.mark.parametrize("where", ["response_format", "structured_outputs"])
def test_structural_tags_hold_every_tag_to_its_schema(client, tag, where):
    kw = {"response_format": tag} if where == "response_format" else {
        "extra_body": {"structured_outputs": {"structural_tag": json.dumps(tag)}}}
    out = _chat(client, max_tokens=120, temperature=1.0, **kw).choices[0]
    text = out.message.content or ""
    bodies = re.findall(r"<fn=weather>(.*?)</fn>", text, re.S)
    if where == "response_format" and tag is TAG_FORMAT and out.finish_reason == "stop":
        assert bodies, text                         # at_least_one
    for body in bodies:
        jsonschema.validate(json.loads(body), WEATHER)
    tail = text.rsplit("</fn>", 1)[-1]
    assert "<fn=" not in tail or out.finish_reason == "length", text   # a trigger always opens a tag


def test_gbnf_grammars_are_taken(client):
    gbnf = 'root ::= "yes" | "no" | num\nnum ::= [1-9] [0-9]*'
    for kw in ({"extra_body": {"structured_outputs": {"grammar": gbnf}}}, {"extra_body": {"guided_grammar": gbnf}}):
        text = _chat(client, temperature=1.0, **kw).choices[0].message.content
        assert re.fullmatch(r"yes|no|[1-9][0-9]*", text), text
    _bad(client, "grammar", extra_body={"structured_outputs": {"grammar": "root ::= ( unclosed"}})
    _bad(client, "not a valid GBNF grammar", response_format={"type": "structural_tag", "format": {
        "type": "tag", "begin": "<a>", "end": "</a>", "content": {"type": "grammar", "grammar": "root ::= ( x"}}})


def test_whitespace_options_shape_the_json(client):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 4}},
              "required": ["a", "b"], "additionalProperties": False}
    tight = _chat(client, extra_body={"structured_outputs": {"json": schema, "disable_any_whitespace": True}})
    assert " " not in tight.choices[0].message.content.replace(json.loads(tight.choices[0].message.content)["b"], "")
    spaced = _chat(client, extra_body={"structured_outputs": {"json": schema, "whitespace_pattern": "[ ]{2}"}})
    assert "  " in spaced.choices[0].message.content


def test_disable_additional_properties_closes_open_objects(client):
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}
    for seed in range(3):
        text = _chat(client, seed=seed, temperature=1.0,
                     extra_body={"structured_outputs": {"json": schema, "disable_additional_properties": True}})
        assert set(json.loads(text.choices[0].message.content)) == {"a"}


def test_parallel_tool_calls_false_allows_one_call_and_true_allows_more_than_four(client):
    tools = [{"type": "function", "function": {"name": "weather", "parameters": WEATHER}}]
    for seed in range(3):
        one = _chat(client, tools=tools, tool_choice="required", parallel_tool_calls=False, seed=seed,
                    temperature=1.0, max_tokens=400).choices[0]
        assert len(one.message.tool_calls or []) <= 1
        assert one.finish_reason in ("tool_calls", "length")
    # Any number of calls: the grammar goes past the numbered calls (the model writes the index).
    from k3.engine.structured import StructuredOutputs
    from k3.engine.structured.grammar import NUMBERED, lark_grammar

    grammar = lark_grammar(StructuredOutputs.from_tools(tools, "required", "response", parallel=True))
    assert "call_more*" in grammar and f"call_{NUMBERED}" in grammar


def test_strict_false_is_not_enforced_but_checked(client):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5}}, "required": ["n"]}
    out = _chat(client, temperature=1.0, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": schema, "strict": False}}).choices[0]
    if out.finish_reason == "stop":
        value = json.loads(out.message.content)            # JSON syntax is still enforced
        valid = jsonschema.Draft202012Validator(schema).is_valid(value)
        assert valid or "does not validate" in out.model_extra.get("warning", ""), out


APPROXIMATED = {
    "uniqueItems": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True, "minItems": 2,
                    "maxItems": 3},
    "not": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 3}}, "required": ["x"],
            "additionalProperties": False, "not": {"properties": {"x": {"const": 0}}}},
    "if/then/else": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}, "v": {"type": "integer", "minimum": 0,
                     "maximum": 9}}, "required": ["k", "v"], "additionalProperties": False,
                     "if": {"properties": {"k": {"const": "a"}}}, "then": {"properties": {"v": {"maximum": 2}}},
                     "else": {"properties": {"v": {"minimum": 5}}}},
    "propertyNames": {"type": "object", "propertyNames": {"pattern": "^[a-c]$"}, "maxProperties": 2,
                      "additionalProperties": {"type": "boolean"}},
    "oneOf": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 5}, {"type": "integer", "minimum": 3,
                                                                           "maximum": 9}]},
}


@pytest.mark.parametrize("keyword", list(APPROXIMATED))
def test_what_the_grammar_cannot_enforce_is_checked_never_returned_invalid(client, keyword):
    schema = APPROXIMATED[keyword]
    for seed in range(3):
        out = _chat(client, seed=seed, temperature=1.0, max_tokens=80, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}).choices[0]
        if out.finish_reason == "stop":
            jsonschema.validate(json.loads(out.message.content), schema)
        else:
            assert out.finish_reason in ("invalid", "length"), out
            if out.finish_reason == "invalid":
                assert "does not validate" in out.model_extra["warning"]
    _bad(client, "Unimplemented keys", response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "array", "uniqueItems": True}, "exact": True}})


def test_tool_parameters_must_be_an_object_schema(client):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "array", "items": {"type": "integer"}}}}]
    _bad(client, "object schema", tools=tools, tool_choice="required")


@pytest.mark.parametrize("kw,says", [
    ({"extra_body": {"structured_outputs": {"json": {"type": "object"}, "backend": "x"}}}, "backend"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "stric": True}}}, "stric"),
    ({"response_format": {"type": "json_object", "schema": {}}}, "schema"),
    ({"response_format": {"type": "structural_tag", "format": {"type": "tag", "begin": "<a>", "end": "</a>",
                                                               "content": {"type": "any_text"}, "max": 2}}}, "max"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": WEATHER, "strictly": True}}]}, "strictly"),
    ({"extra_body": {"guided_json": {"type": "object"}, "guided_decoding_backend": "xgrammar"}}, "backend"),
])
def test_unknown_structured_output_fields_are_400s_naming_them(client, kw, says):
    _bad(client, says, **kw)


def test_ordinary_client_fields_stay_accepted(client):
    out = _chat(client, user="u-1", store=False, metadata={"k": "v"}, max_tokens=4)
    assert out.choices[0].finish_reason in ("stop", "length")


def test_a_finished_answer_is_not_length_when_only_the_frame_was_left(client, llm):
    """max_tokens that hold the answer but not K3's closing frame after it: "stop", not "length"."""
    ask = {"extra_body": {"structured_outputs": {"choice": ["yes", "no"]}}, "temperature": 0}
    free = _chat(client, max_tokens=50, **ask).choices[0]
    spent = len(llm.tokenizer.encode(free.message.content))
    out = _chat(client, max_tokens=spent, **ask).choices[0]
    assert out.message.content == free.message.content and out.finish_reason == "stop", out
    cut = _chat(client, max_tokens=spent - 1, **ask).choices[0] if spent > 1 else None
    assert cut is None or cut.finish_reason == "length"


def test_responses_api_text_format_and_function_tools(client):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    r = client.responses.create(model=MODEL, input="Is it ok?", max_output_tokens=200, temperature=1.0,
                                text={"format": {"type": "json_schema", "name": "ok", "schema": schema, "strict": True}},
                                extra_body=OFF)
    assert r.status == "completed", r
    assert json.loads(r.output_text) in ({"ok": True}, {"ok": False})
    tools = [{"type": "function", "name": "weather", "parameters": WEATHER, "strict": True}]
    r = client.responses.create(model=MODEL, input=[{"role": "user", "content": "Weather?"}], tools=tools,
                                tool_choice="required", max_output_tokens=300, extra_body=OFF)
    calls = [item for item in r.output if item.type == "function_call"]
    if r.status == "completed":
        assert calls and all(jsonschema.Draft202012Validator(WEATHER).is_valid(json.loads(c.arguments)) for c in calls)
    follow = [{"role": "user", "content": "Weather?"}] + [
        {"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in calls] + [
        {"type": "function_call_output", "call_id": c.call_id, "output": "sunny"} for c in calls]
    again = client.responses.create(model=MODEL, input=follow, max_output_tokens=20, extra_body=OFF)
    assert again.status in ("completed", "incomplete")


def test_responses_api_streams_events_that_add_up(client):
    events = list(client.responses.create(model=MODEL, input="Hello", max_output_tokens=30, stream=True,
                                          extra_body=OFF))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == final.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_responses_api_refuses_what_it_cannot_do(client):
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model=MODEL, input="Hi", previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="function tools"):
        client.responses.create(model=MODEL, input="Hi", tools=[{"type": "web_search"}])
