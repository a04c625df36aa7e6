"""The public schema corpus (k3.eval.schema_corpus: configuration files, Kubernetes, BFCL tools, Pydantic):
k3 accepts a schema iff the grammar library accepts it with the same approximations, or says why it is
stricter; acceptance stays at the floor the closing note reports; outputs generated for corpus schemas
validate against the whole schema (or are reported, never returned as valid); the two rewrite bugs of
issue 68 stay fixed."""

import json

import jsonschema
import llguidance
import pytest

from k3.defaults import default_model
from k3.engine import LLM, SamplingParams
from k3.engine.structured import StructuredOutputs
from k3.engine.structured.grammar import APPROXIMATE
from k3.engine.structured.matcher import validate
from k3.eval.schema_corpus import corpus

FLOOR = 0.95          # accepted share of the whole corpus (measured: 232 of 236)


@pytest.fixture(scope="module")
def schemas():
    return corpus()


def _engine_problem(schema) -> str | None:
    """The library's verdict on the schema as given, with k3's approximation options."""
    schema = {**schema, "x-guidance": APPROXIMATE} if isinstance(schema, dict) else schema
    error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
        json.dumps({"grammars": [{"json_schema": schema}]}))
    return messages[0] if error else None


def _k3_problem(schema) -> str | None:
    try:
        validate(StructuredOutputs(json=schema))
    except ValueError as e:
        return str(e)
    return None


def test_k3_accepts_what_the_library_accepts(schemas):
    accepted = total = 0
    for subset, items in schemas.items():
        for name, schema in items:
            engine, k3 = _engine_problem(schema), _k3_problem(schema)
            assert (engine is None) == (k3 is None), f"{subset}/{name}: library {engine!r}, k3 {k3!r}"
            accepted += k3 is None
            total += 1
    assert accepted / total >= FLOOR, f"{accepted} of {total}"


@pytest.mark.parametrize("schema,what", [
    ({"type": "object", "properties": {"a": {"type": "object"}}, "patternProperties": {"^[a-z]*$": {"type": "object"}}},
     "a property crossed by a pattern, both open objects"),
    ({"type": "object", "properties": {"list": {"$id": "list.json", "type": "array"}}}, "a subschema with its own $id"),
    ({"type": "object", "properties": {"list": {"id": "list.json", "type": "array"}}}, "draft-04's id"),
    ({"$ref": "#/$defs/a", "type": "object", "$defs": {"a": {"type": "object", "properties": {
        "b": {"$ref": "#/$defs/a", "description": "x", "type": "object"}}}}}, "a recursive $ref beside other keywords"),
])
def test_rewrites_never_refuse_what_the_library_takes(schema, what):
    assert _k3_problem(schema) is None, what


@pytest.fixture(scope="module")
def llm():
    return LLM(str(default_model()), max_num_seqs=8, cache_memory="64MiB")


def test_outputs_for_corpus_schemas_validate_or_are_reported(llm, schemas):
    """Every 6th accepted schema of each subset, two samples: a finished output validates against the whole
    schema; one that does not is "invalid" with a warning, never "stop"."""
    picked = [(f"{subset}/{name}", schema) for subset, items in schemas.items()
              for name, schema in items[::6] if _k3_problem(schema) is None]
    params = [SamplingParams(max_tokens=400, temperature=1.0, seed=seed, structured_outputs=StructuredOutputs(json=s))
              for _, s in picked for seed in (1, 2)]
    outs = llm.generate(["Write the JSON:"] * len(params), params)
    finished = 0
    for (name, schema), out in zip([p for p in picked for _ in (1, 2)], outs):
        if out.finish_reason == "stop":
            finished += 1
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            error = jsonschema.exceptions.best_match(
                cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(json.loads(out.text)))
            assert error is None, f"{name}: {error.message}"
        else:
            assert out.finish_reason in ("length", "invalid"), (name, out.finish_reason)
            if out.finish_reason == "invalid":
                assert "does not validate" in out.warning
    assert finished >= len(outs) // 4, f"only {finished} of {len(outs)} outputs finished"
