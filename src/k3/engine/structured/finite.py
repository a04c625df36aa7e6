"""Numbers a constrained output may hold are finite in a double.

The grammar library writes an unbounded JSON number with any exponent (`1e0715929876164668228`, which
every JSON reader turns into inf) and cannot bound exponents: a number schema with a minimum or a maximum
is written in plain decimal, and it refuses bounds past about 1e16. So a number that the schema leaves
unbounded gets bounds of ±LIMIT (an integer there is still exact in a double), and a value the schema
leaves open (an object's additional properties, an array's items, `{}`) becomes ANY: any JSON value
with its numbers so bounded. A schema's own bounds are kept as given.

Where the library intersects schemas (the branches of an allOf, a `$ref` or an anyOf beside other
keywords, a property that a `patternProperties` pattern also matches) it cannot intersect ANY with ANY
(a recursive definition each time) and would refuse the schema. So a branch of an allOf and a property
crossed by a pattern keep their open values open, and a schema with any other intersection keeps all
its open values open. There a number may still be written unbounded, and the check after generation
(check.py) refuses a non-finite one. A subschema with an `$id` of its own (draft-04:
`id`) is a new base for the `$ref`s inside it, so ANY is defined again in its own `$defs`.
"""

from __future__ import annotations

from k3.engine.structured.bounds import json_nodes

LIMIT = 1e15
ANY_NAME = "k3_any_value"
ANY_REF = {"$ref": f"#/$defs/{ANY_NAME}"}
ANY = {"anyOf": [{"type": ["string", "boolean", "null"]}, {"type": "number", "minimum": -LIMIT, "maximum": LIMIT},
                 {"type": "array", "items": ANY_REF}, {"type": "object", "additionalProperties": ANY_REF}]}
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
SUBSCHEMAS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
# Keywords that constrain a value: beside a `$ref`, an anyOf or a oneOf they make the library intersect.
CONSTRAINING = {"type", "properties", "patternProperties", "additionalProperties", "items", "prefixItems",
                "required", "enum", "const", "pattern", "format", "minLength", "maxLength", "minItems", "maxItems",
                "minProperties", "maxProperties", "contains", *BOUNDS, "multipleOf", "$ref", "anyOf", "oneOf"}


def finite_numbers(schema, closed: bool = False):
    """A copy of a root schema with every number bounded and every open value ANY (module note).
    `closed`: an object that says nothing of other keys gets none (vLLM's disable_additional_properties)."""
    if schema is True or schema == {}:
        return {**ANY, "$defs": {ANY_NAME: ANY}}
    if not isinstance(schema, dict):
        return schema
    out = _Rewrite(closed, open_values=intersects(schema)).node(schema)
    return {**out, "$defs": {**out.get("$defs", {}), ANY_NAME: ANY}}


def intersects(schema) -> bool:
    """Whether the library would intersect schemas anywhere in `schema` other than where _Rewrite keeps
    values open itself: an allOf, or a `$ref`, anyOf or oneOf beside other constraining keywords."""
    for item in json_nodes(schema):
        if isinstance(item, dict):
            combined = [k for k in ("$ref", "anyOf", "oneOf") if k in item]
            if "allOf" in item or (combined and len(CONSTRAINING.intersection(item)) > 1):
                return True
    return False


class _Rewrite:
    def __init__(self, closed: bool, open_values: bool):
        self.closed, self.open_values = closed, open_values

    def value(self, schema, part: bool = False):
        """A schema in a value position: open ones become ANY. `part`: where the library intersects it
        with another (an allOf's branch, a property crossed by a pattern), its open values stay open."""
        if (schema is True or schema == {}) and not (part or self.open_values):
            return ANY_REF
        return self.node(schema, part) if isinstance(schema, dict) else schema

    def node(self, schema: dict, part: bool = False) -> dict:
        out = self._children(schema, part)
        kinds = out.get("type")
        kinds = set(kinds) if isinstance(kinds, list) else {kinds}
        if kinds & {"number", "integer"} and "enum" not in out and "const" not in out:
            if "minimum" not in out and "exclusiveMinimum" not in out:
                out["minimum"] = -LIMIT
            if "maximum" not in out and "exclusiveMaximum" not in out:
                out["maximum"] = LIMIT
        if _own_base(out):
            out["$defs"] = {**out.get("$defs", {}), ANY_NAME: ANY}
        if "allOf" in out:
            return out
        counted = "minProperties" in out or "maxProperties" in out   # the library counts only listed keys there
        if "object" in kinds and "additionalProperties" not in out and not counted and (self.closed or not part):
            if self.closed or not self.open_values:
                out["additionalProperties"] = False if self.closed else ANY_REF
        if "array" in kinds and "items" not in out and "prefixItems" not in out and not (part or self.open_values):
            out["items"] = ANY_REF
        return out

    def _children(self, schema: dict, part: bool) -> dict:
        out = {}
        crossed = isinstance(schema.get("patternProperties"), dict) and bool(schema["patternProperties"])
        for key, value in schema.items():
            if key in ("properties", "patternProperties") and isinstance(value, dict):
                out[key] = {k: self.value(v, crossed) for k, v in value.items()}
            elif key in SUBSCHEMAS and isinstance(value, dict):
                out[key] = {k: self.value(v) for k, v in value.items()}
            elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
                out[key] = self.value(value)
            elif key in ("anyOf", "oneOf", "prefixItems") and isinstance(value, list):
                out[key] = [self.value(v, part) for v in value]
            elif key == "allOf" and isinstance(value, list):
                out[key] = [self.value(v, True) for v in value]
            else:
                out[key] = value
        return out


def _own_base(schema: dict) -> bool:
    """A subschema that starts a new base URI for the `$ref`s inside it (`$id`, or draft-04's `id` string)."""
    return isinstance(schema.get("$id"), str) or isinstance(schema.get("id"), str)
