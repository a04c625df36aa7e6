"""Numbers a constrained output may hold are finite in a double.

The grammar library writes an unbounded JSON number with any exponent (`1e0715929876164668228`, which
every JSON reader turns into inf) and cannot bound exponents: a number schema with a minimum or a maximum
is written in plain decimal, and it refuses bounds past about 1e16. So a number that the schema leaves
unbounded gets bounds of ±LIMIT (an integer there is still exact in a double), and a value the schema
leaves open (an object's additional properties, an array's items, `{}`) becomes ANY: any JSON value
with its numbers so bounded. A schema's own bounds are kept as given.
"""

from __future__ import annotations

LIMIT = 1e15
ANY_NAME = "k3_any_value"
ANY_REF = {"$ref": f"#/$defs/{ANY_NAME}"}
ANY = {"anyOf": [{"type": ["string", "boolean", "null"]}, {"type": "number", "minimum": -LIMIT, "maximum": LIMIT},
                 {"type": "array", "items": ANY_REF}, {"type": "object", "additionalProperties": ANY_REF}]}
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
SUBSCHEMAS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")


def finite_numbers(schema):
    """A copy of a root schema with every number bounded and every open value ANY (module note)."""
    if schema is True or schema == {}:
        return {**ANY, "$defs": {ANY_NAME: ANY}}
    if not isinstance(schema, dict):
        return schema
    out = _node(schema)
    return {**out, "$defs": {**out.get("$defs", {}), ANY_NAME: ANY}}


def _value(schema, part: bool = False):
    """A schema in a value position: open ones become ANY. `part`: a branch of an allOf, whose open values
    stay open (the library intersects the branches and cannot intersect ANY with a sibling's schema)."""
    if (schema is True or schema == {}) and not part:
        return ANY_REF
    return _node(schema, part) if isinstance(schema, dict) else schema


def _node(schema: dict, part: bool = False) -> dict:
    out = {}
    for key, value in schema.items():
        if key in SUBSCHEMAS and isinstance(value, dict):
            out[key] = {k: _value(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
            out[key] = _value(value)
        elif key in ("anyOf", "oneOf", "prefixItems") and isinstance(value, list):
            out[key] = [_value(v, part) for v in value]
        elif key == "allOf" and isinstance(value, list):
            out[key] = [_value(v, part=True) for v in value]
        else:
            out[key] = value
    kinds = out.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if kinds & {"number", "integer"} and "enum" not in out and "const" not in out:
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -LIMIT
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = LIMIT
    if part or "allOf" in out:
        return out
    counted = "minProperties" in out or "maxProperties" in out   # the library counts only listed keys there
    if "object" in kinds and "additionalProperties" not in out and not counted:
        out["additionalProperties"] = ANY_REF
    if "array" in kinds and "items" not in out and "prefixItems" not in out:
        out["items"] = ANY_REF
    return out
