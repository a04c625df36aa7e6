"""A tool's arguments in K3's per-argument XTML form, as Lark rules (llguidance's dialect).

`<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>` per argument, as the chat
renderer writes them: T is "string" (VALUE the raw text), "number", "boolean", "null", "object" or
"array" (VALUE its JSON). Properties come in the schema's order, the required ones always, the others
optionally. A property whose schema has no single such type (anyOf, a list of types) makes the form
unavailable for that tool (None): its calls then use the JSON-block form only.
"""

from __future__ import annotations

import json

from k3.chat.specials import CLOSE, OPEN, SEP

XTML_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null",
              "object": "object", "array": "array"}


def xtml_arguments(prefix: str, schema: dict, json_style: dict) -> list[str] | None:
    """Rules defining `{prefix}` (the argument list) and helpers, or None when the form cannot express it."""
    props = schema.get("properties") or {}
    if not isinstance(props, dict) or any(not isinstance(s, dict) for s in props.values()):
        return None
    if not props:
        return [f"{prefix}: "] if schema.get("additionalProperties") is False else _any_arguments(prefix)
    required = set(schema.get("required") or ())
    rules, parts = [], []
    for i, (key, sub) in enumerate(props.items()):
        value = _value(f"{prefix}_v{i}", sub, json_style)
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


def _value(name: str, sub: dict, json_style: dict) -> tuple[str, list[str]] | None:
    kind = sub.get("type")
    if kind is None and "enum" in sub and all(isinstance(v, str) for v in sub["enum"]):
        kind = "string"
    if not isinstance(kind, str) or kind not in XTML_TYPES:
        return None
    if kind == "string":
        return "string", [f"{name}: " + _raw_string(sub)]
    schema = {**sub, "x-guidance": {**json_style, **sub.get("x-guidance", {})}}
    return XTML_TYPES[kind], [f"{name}: %json {json.dumps(schema)}"]


def _raw_string(sub: dict) -> str:
    """A string argument's raw text: its enum's values, its length bounds, its pattern, or any text."""
    if "enum" in sub:
        return " | ".join(json.dumps(v) for v in sub["enum"])
    if "pattern" in sub:
        pattern = sub["pattern"].removeprefix("^").removesuffix("$")
        return "/" + pattern.replace("/", "\\/") + "/"
    lo, hi = sub.get("minLength", 0), sub.get("maxLength")
    return "/(?s:.{" + f"{lo},{'' if hi is None else hi}" + "})/"
