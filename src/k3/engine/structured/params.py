"""`StructuredOutputs`: what a request's output must match (vLLM's `structured_outputs` names).

Exactly one of `json` (a JSON schema, as a dict or its JSON text), `json_object` (any JSON object),
`regex`, `choice` (one of these strings) or `grammar` (a Lark grammar in llguidance's dialect).
`frame` is set by the chat layer: the constraint then covers the response channel of K3's assistant
message ("think": after a free thinking channel; "response": thinking off), not the raw text.
`tools` (chat only) is the other kind: ((name, parameters JSON schema), ...) with `tool_mode`
"required" (the answer must call one or more of them) or "auto" (free text, or calls; only the calls
are constrained: K3's XTML tool section, arguments valid against the tool's parameters).
"""

from __future__ import annotations

import json as _json
from dataclasses import dataclass

from k3.engine.structured import bounds

KINDS = ("json", "json_object", "regex", "choice", "grammar")
FRAMES = (None, "think", "response")
TOOL_MODES = ("required", "auto")


@dataclass(frozen=True)
class StructuredOutputs:
    json: object = None
    json_object: bool = False
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    frame: str | None = None
    tools: tuple[tuple[str, dict], ...] | None = None
    tool_mode: str = "required"

    def __post_init__(self) -> None:
        if self.choice is not None:
            object.__setattr__(self, "choice", tuple(self.choice))
        if self.tools is not None:
            if self.frame is None or not self.tools or self.tool_mode not in TOOL_MODES:
                raise ValueError("structured_outputs.tools: a chat constraint (frame set), one tool or more, "
                                 f"tool_mode one of {TOOL_MODES}")
            object.__setattr__(self, "tools", tuple((str(n), dict(s)) for n, s in self.tools))
        given = [k for k in (*KINDS, "tools") if getattr(self, k) not in (None, False)]
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
        self._check_bounds()

    def _check_bounds(self) -> None:
        """What the grammar library may be asked (bounds.py): refused here, before any of it is compiled."""
        if self.json is not None:
            bounds.check_schema(self.json, "structured_outputs.json")
        if self.choice is not None:
            bounds.check_choice(self.choice, "structured_outputs.choice")
        for name in ("regex", "grammar"):
            if getattr(self, name) is not None:
                bounds.check_text(getattr(self, name), f"structured_outputs.{name}", grammar=name == "grammar")
        if self.tools is not None:
            bounds.check_tools(self.tools)

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

    @classmethod
    def from_tools(cls, tools: list[dict] | None, tool_choice, frame: str) -> "StructuredOutputs | None":
        """The constraint for a chat request's tools: "required" or a named function -> calls required
        (of that function only); "auto" or unset -> calls optional; "none" or no tools -> None."""
        from k3.chat.tools import tool_name
        from k3.chat.validate import check_tool_choice

        if not tools or tool_choice == "none":
            return None
        name = check_tool_choice(tool_choice)
        chosen = [t for t in tools if name is None or tool_name(t) == name]
        if not chosen:
            raise ValueError(f"tool_choice names {name!r}, which is not among the request's tools")
        specs = tuple((tool_name(t), (t.get("function") or t).get("parameters") or {"type": "object"}) for t in chosen)
        bad = [n for n, p in specs if not isinstance(p, dict)]
        if bad:
            raise ValueError(f"tools: the parameters of {bad[0]!r} must be a JSON schema object")
        mode = "required" if name is not None or tool_choice == "required" else "auto"
        return cls(tools=specs, tool_mode=mode, frame=frame)


def constrains_calls(tools, tool_choice, shaped: bool) -> bool:
    """Whether a chat request's tool calls are enforced: with tools offered, always for "required" or a
    named function; for "auto" (or unset) unless another constraint (`shaped`) already shapes the answer."""
    return bool(tools) and tool_choice != "none" and not (shaped and tool_choice in (None, "auto"))
