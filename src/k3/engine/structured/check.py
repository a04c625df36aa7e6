"""The check after generation: a finished JSON output held to its whole schema with `jsonschema`.

The grammar enforces what it can token by token and approximates the rest by a superset (grammar.py,
APPROXIMATE; cycles.py; finite.py where values stay open): `uniqueItems`, `not`, `if`/`then`/`else`,
`propertyNames`, `oneOf`'s exclusivity, `min/maxProperties` over optional keys, `dependentRequired`,
formats the library does not know. So every finished output is validated here against the schema as
the request gave it (its draft from `$schema`, formats checked), numbers must be finite, and a failure
is reported (the server resamples a non-streamed choice, then says `finish_reason: "invalid"`), never
returned as valid. Validators are built once per schema (a small cache keyed by its JSON text).
"""

from __future__ import annotations

import functools
import json
import math

from k3.engine.structured.bounds import json_nodes


def json_problem(schema, text: str) -> str | None:
    """Why `text` is not a JSON value valid against `schema`, or None when it is."""
    import jsonschema     # here, not at import: an engine that never checks an output does not load it

    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, ValueError) as e:
        return f"not valid JSON ({e})"
    if not _finite(value):
        return "a number in it is not finite in a double (inf)"
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except jsonschema.exceptions.SchemaError as e:
        return f"the schema itself is invalid: {e.message}"
    except Exception as e:     # an unresolvable $ref and the like: the output cannot be shown valid
        return f"the output could not be checked against the schema ({type(e).__name__}: {e})"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(the top level)"
    return f"at {where}: {error.message[:300]} (keyword {error.validator!r})"


def call_problems(tools, calls) -> list[str]:
    """For each finished tool call (objects with `.name`, `.arguments`, `.complete`) that fails its tool's
    parameters, a line naming it; `tools`: ((name, parameters), ...)."""
    schemas = dict(tools)
    out = []
    for call in calls:
        if getattr(call, "complete", True) and call.name in schemas:
            problem = json_problem(schemas[call.name], call.arguments)
            if problem:
                out.append(f"the call to {call.name!r} does not validate against its parameters: {problem}")
    return out


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str):
    import jsonschema

    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite(value) -> bool:
    """No float in the value (itself, or held in any of its objects and arrays) is inf."""
    held = (v for node in json_nodes(value) for v in (node.values() if isinstance(node, dict) else node))
    return all(math.isfinite(v) for v in (value, *held) if isinstance(v, float))


def output_problem(so, content: str | None = None, calls=()) -> str | None:
    """Why a finished output breaks its constraint (`so`: StructuredOutputs or None): its JSON body
    (`content`: the text, or the chat answer's content) or its tool calls; None when it holds. Regexes,
    choices, grammars and structural tags are enforced exactly by the grammar and not checked again."""
    if so is None:
        return None
    if so.tools is not None:
        return "; ".join(call_problems(so.tools, calls)) or None
    if so.json is not None or so.json_object:
        return json_problem({"type": "object"} if so.json_object else so.json, content or "")
    return None
