"""`StructuredOutputs`: what a request's output must match (vLLM's `structured_outputs` names).

Exactly one of `json` (a JSON schema, as a dict or its JSON text), `json_object` (any JSON object),
`regex`, `choice` (one of these strings) or `grammar` (a Lark grammar in llguidance's dialect).
`frame` is set by the chat layer: the constraint then covers the response channel of K3's assistant
message ("think": after a free thinking channel; "response": thinking off), not the raw text.
"""

from __future__ import annotations

import json as _json
from dataclasses import dataclass

KINDS = ("json", "json_object", "regex", "choice", "grammar")
FRAMES = (None, "think", "response")


@dataclass(frozen=True)
class StructuredOutputs:
    json: object = None
    json_object: bool = False
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    frame: str | None = None

    def __post_init__(self) -> None:
        if self.choice is not None:
            object.__setattr__(self, "choice", tuple(self.choice))
        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError("structured_outputs: give exactly one of json, json_object, regex, choice, grammar "
                             f"(got {', '.join(given) or 'none'})")
        if isinstance(self.json, str):
            try:
                object.__setattr__(self, "json", _json.loads(self.json))
            except _json.JSONDecodeError as e:
                raise ValueError(f"structured_outputs.json: not valid JSON ({e.msg} at character {e.pos})") from None
        if self.json is not None and not isinstance(self.json, (dict, bool)):
            raise ValueError(f"structured_outputs.json: a JSON schema is an object, got {type(self.json).__name__}")
        if self.choice is not None and (not self.choice or not all(isinstance(c, str) for c in self.choice)):
            raise ValueError("structured_outputs.choice: a non-empty list of strings")
        for name in ("regex", "grammar"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v):
                raise ValueError(f"structured_outputs.{name}: a non-empty string")
        if self.frame not in FRAMES:
            raise ValueError(f"structured_outputs.frame: one of {FRAMES}")

    @classmethod
    def from_request(cls, value: dict, frame: str | None = None) -> "StructuredOutputs":
        """vLLM's request field {"json": ..., "regex": ..., "choice": [...], "grammar": ..., "json_object": true}."""
        if not isinstance(value, dict):
            raise ValueError("structured_outputs: an object with one of json, json_object, regex, choice, grammar")
        unknown = sorted(set(value) - set(KINDS) - {"whitespace_pattern", "disable_additional_properties"})
        if unknown:
            raise ValueError(f"structured_outputs: unknown key(s) {', '.join(unknown)}; k3 takes {', '.join(KINDS)}")
        return cls(**{k: value[k] for k in KINDS if k in value}, frame=frame)

    @classmethod
    def from_response_format(cls, response_format: dict | None, frame: str) -> "StructuredOutputs | None":
        """OpenAI's response_format: {"type": "text"} (None), {"type": "json_object"}, or
        {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}."""
        if response_format is None:
            return None
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind == "text":
            return None
        if kind == "json_object":
            return cls(json_object=True, frame=frame)
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
                raise ValueError('response_format.json_schema: an object with "name" and "schema" (a JSON schema)')
            return cls(json=spec.get("schema", {}), frame=frame)
        raise ValueError(f'response_format.type: "text", "json_object" or "json_schema", got {kind!r}')
