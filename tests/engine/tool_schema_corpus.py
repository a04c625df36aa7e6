"""Tool parameter schemas as people write and generate them, for the tool-call validity tests: Pydantic
models (nested `$defs`), a `$ref` tree, keywords outside top-level `properties`, string formats, patterns
with bounds, `\\d`, and property names that need escaping. Each is (name, parameters)."""

from __future__ import annotations

from typing import Literal

import openai
import pydantic


class Item(pydantic.BaseModel):
    sku: str = pydantic.Field(max_length=6)
    qty: int = pydantic.Field(ge=1, le=9)


class Order(pydantic.BaseModel):
    items: list[Item] = pydantic.Field(max_length=2)
    rush: bool
    note: str | None = pydantic.Field(max_length=8)


class Address(pydantic.BaseModel):
    city: Literal["Oslo", "Lima", "Pune"]
    zip: str = pydantic.Field(pattern=r"^\d{4}$")


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=8)
    home: Address
    work: Address | None


def _pydantic(model) -> dict:
    return openai.pydantic_function_tool(model)["function"]["parameters"]


def _obj(props: dict, required=None, **kw) -> dict:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required, **kw}


S = {"type": "string", "maxLength": 8}
N = {"type": "integer", "minimum": 0, "maximum": 9}
CORPUS = [
    ("pydantic_nested_list", _pydantic(Order)),
    ("pydantic_ref_tree", _pydantic(Person)),
    ("ref_at_top", {"$ref": "#/$defs/args", "$defs": {"args": _obj({"q": S, "n": N}, additionalProperties=False)}}),
    ("definitions_ref", _obj({"p": {"$ref": "#/definitions/pt"}}, additionalProperties=False,
                             definitions={"pt": _obj({"x": N, "y": N}, additionalProperties=False)})),
    ("any_of_at_top", {"anyOf": [_obj({"a": S}, additionalProperties=False),
                                 _obj({"b": N}, additionalProperties=False)]}),
    ("all_of_at_top", {"allOf": [_obj({"a": S}), _obj({"b": N})]}),
    ("min_properties", _obj({"a": S, "b": N}, required=[], minProperties=1, additionalProperties=False)),
    ("required_not_in_properties", _obj({"a": S}, required=["a", "z"])),
    ("const_string", _obj({"mode": {"type": "string", "const": "fast"}, "n": N}, additionalProperties=False)),
    ("const_untyped", _obj({"mode": {"const": "slow"}}, additionalProperties=False)),
    ("formats", _obj({"day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "date-time"},
                      "id": {"type": "string", "format": "uuid"}, "to": {"type": "string", "format": "email"}},
                     additionalProperties=False)),
    ("max_length_and_pattern", _obj({"code": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+[0-9]?$"}},
                                    additionalProperties=False)),
    ("ascii_digits", _obj({"pin": {"type": "string", "pattern": r"^\d{3,5}$"},
                           "word": {"type": "string", "pattern": r"^\w{1,6}$"}}, additionalProperties=False)),
    ("escaped_keys", _obj({'say "hi"': S, "back\\slash": S, "<tag>": N, "pipe|bar": N}, additionalProperties=False)),
    ("slash_pattern", _obj({"path": {"type": "string", "pattern": "^/[a-z]{1,4}/[a-z]{1,4}$"}},
                           additionalProperties=False)),
    ("enum_mixed", _obj({"v": {"enum": ["a", 1, None, True]}}, additionalProperties=False)),
    ("type_list", _obj({"v": {"type": ["string", "null"], "maxLength": 4}}, additionalProperties=False)),
    ("numbers", _obj({"x": {"type": "number", "minimum": -1, "maximum": 1}, "k": {"type": "integer",
                                                                                  "multipleOf": 3, "maximum": 30,
                                                                                  "minimum": 0}},
                     additionalProperties=False)),
    ("open_object", {"type": "object"}),
    ("plain_strings", _obj({"city": S, "days": N}, required=["city"], additionalProperties=False)),
]
