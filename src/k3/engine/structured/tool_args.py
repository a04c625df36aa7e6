"""A tool's arguments in K3's per-argument XTML form, as Lark rules (llguidance's dialect).

`<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>` per argument, as the chat
renderer writes them: T is "string" (VALUE the raw text), "number", "boolean", "null", "object" or
"array" (VALUE its JSON). Properties come in the schema's order, the required ones always, the others
optionally.

The form is offered only where it constrains exactly what the schema allows; anywhere it could not, the
tool's calls use the JSON-block form alone (None here), which the grammar library checks against the
whole schema. So: a top-level schema of properties, required keys and additionalProperties only (no
$ref, anyOf, allOf, minProperties, ... at the top), every required key among the properties, keys that
need no escaping in `key="..."`, and properties with one XTML type; a string's raw text takes an enum,
a const or length bounds, never a pattern or a format (their meaning in raw text is not the JSON
Schema one). Non-string values are JSON checked against the property's schema, with the top level's
$defs beside it so its references resolve.
"""

from __future__ import annotations

import json
import re

from k3.chat.specials import CLOSE, OPEN, SEP

TOP_KEYS = {"type", "properties", "required", "additionalProperties", "description", "title", "$schema", "$defs",
            "definitions"}
STRING_KEYS = {"type", "enum", "const", "minLength", "maxLength", "description", "title", "default", "examples"}
PLAIN_KEY = re.compile(r'[^"\\<>|\x00-\x1f\x7f]+')
XTML_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null",
              "object": "object", "array": "array"}


def xtml_arguments(prefix: str, schema: dict, json_style: dict) -> list[str] | None:
    """Rules defining `{prefix}` (the argument list) and helpers, or None when the form cannot express it."""
    props = schema.get("properties") or {}
    if not isinstance(props, dict) or any(not isinstance(s, dict) for s in props.values()):
        return None
    required = set(schema.get("required") or ())
    if set(schema) - TOP_KEYS or schema.get("type", "object") != "object" or not required <= set(props):
        return None
    if any(not PLAIN_KEY.fullmatch(key) for key in props):
        return None
    if not props:
        return [f"{prefix}: "] if schema.get("additionalProperties") is False else _any_arguments(prefix)
    defs = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
    rules, parts = [], []
    for i, (key, sub) in enumerate(props.items()):
        value = _value(f"{prefix}_v{i}", sub, json_style, defs)
        if value is None:
            return None
        kind, value_rules = value
        head = json.dumps(f'argument key="{key}" type="{kind}"')
        rules.append(f"{prefix}_a{i}: {OPEN} {head} {SEP} {prefix}_v{i} {CLOSE} \"argument\" {SEP}")
        rules += value_rules
        parts.append(f"{prefix}_a{i}" + ("" if key in required else "?"))
    return [f"{prefix}: " + " ".join(parts)] + rules


def _any_arguments(prefix: str) -> list[str]:
    """A schema without properties (any object): any keys, each with a well-formed value of its type."""
    return [f"{prefix}: {prefix}_any*",
            f'{prefix}_any: {OPEN} "argument key=\\"" {prefix}_key "\\" type=\\"" {prefix}_tv {CLOSE} "argument" {SEP}',
            f'{prefix}_key: /[^"]+/',
            f'{prefix}_tv: "string\\"" {SEP} {prefix}_raw | {prefix}_type "\\"" {SEP} {prefix}_json',
            f"{prefix}_type: " + " | ".join(json.dumps(t) for t in ("number", "boolean", "null", "object", "array")),
            f"{prefix}_raw: /(?s:.*)/",
            f"{prefix}_json: %json {{}}"]


def _value(name: str, sub: dict, json_style: dict, defs: dict) -> tuple[str, list[str]] | None:
    kind = sub.get("type")
    if kind is None and ("enum" in sub and all(isinstance(v, str) for v in sub["enum"]) or isinstance(sub.get("const"), str)):
        kind = "string"
    if not isinstance(kind, str) or kind not in XTML_TYPES:
        return None
    if kind == "string":
        raw = _raw_string(sub)
        return None if raw is None else ("string", [f"{name}: " + raw])
    schema = {**sub, **defs, "x-guidance": {**json_style, **sub.get("x-guidance", {})}}
    return XTML_TYPES[kind], [f"{name}: %json {json.dumps(schema)}"]


def _raw_string(sub: dict) -> str | None:
    """A string argument's raw text: its const, its enum's values, or any text within its length bounds;
    None for anything raw text could not hold to exactly (a pattern, a format, enum values of other types)."""
    if set(sub) - STRING_KEYS:
        return None
    if "const" in sub:
        return json.dumps(sub["const"]) if isinstance(sub["const"], str) else None
    if "enum" in sub:
        values = sub["enum"]
        return " | ".join(json.dumps(v) for v in values) if values and all(isinstance(v, str) for v in values) else None
    lo, hi = sub.get("minLength", 0), sub.get("maxLength")
    if not isinstance(lo, int) or not (hi is None or isinstance(hi, int)):
        return None
    return "/(?s:.{" + f"{lo},{'' if hi is None else hi}" + "})/"
