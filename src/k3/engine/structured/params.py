"""`StructuredOutputs`: what a request's output must match (vLLM's `structured_outputs` names).

Exactly one of `json` (a JSON schema, as a dict or its JSON text), `json_object` (any JSON object),
`regex`, `choice` (one of these strings), `grammar` (a Lark grammar in llguidance's dialect, or a
GBNF/EBNF one: `root ::= ...`, as llama.cpp and xgrammar take) or `structural_tag` (structural_tag.py).
Options for JSON: `whitespace_pattern` (free whitespace matching it), `disable_any_whitespace` (none at
all; k3's default is one space after `,` and `:`), `disable_additional_properties` (objects whose schema
says nothing of other keys get none), and `exact`: refuse a schema with a keyword the grammar cannot
enforce token by token, instead of approximating it and checking the output afterwards (check.py).
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
from k3.engine.structured.structural_tag import lark_text, normalize, only_fields

KINDS = ("json", "json_object", "regex", "choice", "grammar", "structural_tag")
OPTIONS = ("whitespace_pattern", "disable_any_whitespace", "disable_additional_properties", "exact")
ACCEPTED = ("disable_fallback",)     # vLLM's: k3 never falls back to the prompt alone, so either value holds
FRAMES = (None, "think", "response")
TOOL_MODES = ("required", "auto")


@dataclass(frozen=True)
class StructuredOutputs:
    json: object = None
    json_object: bool = False
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    structural_tag: object = None
    frame: str | None = None
    tools: tuple[tuple[str, dict], ...] | None = None
    tool_mode: str = "required"
    max_calls: int | None = None          # tool calls in one answer (None: any number; 1: parallel_tool_calls off)
    whitespace_pattern: str | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    exact: bool = False
    enforced: bool = True                 # False: OpenAI's `strict: false`, JSON syntax only, the schema checked after

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
            raise ValueError(f"structured_outputs: give exactly one of {', '.join(KINDS)} "
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
        self._check_options()
        self._check_bounds()

    def _check_options(self) -> None:
        if self.grammar is not None:
            object.__setattr__(self, "grammar", lark_text(self.grammar, "structured_outputs.grammar"))
        if self.structural_tag is not None:
            object.__setattr__(self, "structural_tag", normalize(self.structural_tag, "structured_outputs.structural_tag"))
        for name in ("disable_any_whitespace", "disable_additional_properties", "exact"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"structured_outputs.{name}: true or false")
        if self.whitespace_pattern is not None and (not isinstance(self.whitespace_pattern, str) or
                                                    self.disable_any_whitespace):
            raise ValueError("structured_outputs.whitespace_pattern: a regex string, and not with "
                             "disable_any_whitespace")
        if self.max_calls is not None and (self.tools is None or not isinstance(self.max_calls, int)
                                           or self.max_calls < 1):
            raise ValueError("structured_outputs.max_calls: a count of 1 or more, for tool calls")

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
        unknown = sorted(set(value) - set(KINDS) - set(OPTIONS) - set(ACCEPTED))
        if unknown:
            raise ValueError(f"structured_outputs: unknown key(s) {', '.join(unknown)}; k3 takes "
                             f"{', '.join(KINDS + OPTIONS + ACCEPTED)}")
        if "disable_fallback" in value and not isinstance(value["disable_fallback"], bool):
            raise ValueError("structured_outputs.disable_fallback: true or false")
        return cls(**{k: value[k] for k in KINDS + OPTIONS if k in value}, frame=frame)

    @classmethod
    def from_response_format(cls, response_format: dict | None, frame: str) -> "StructuredOutputs | None":
        """OpenAI's response_format: {"type": "text"} (None), {"type": "json_object"}, {"type": "json_schema",
        "json_schema": {"name", "description", "schema", "strict", "exact"}} (`strict: false`: not enforced,
        as OpenAI; `exact`: k3's, see the module note), or vLLM's {"type": "structural_tag", ...}."""
        if response_format is None:
            return None
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind == "structural_tag":
            return cls(structural_tag=response_format, frame=frame)
        if kind not in ("text", "json_object", "json_schema"):
            raise ValueError(f'response_format.type: "text", "json_object", "json_schema" or "structural_tag", '
                             f"got {kind!r}")
        only_fields(response_format, {"type", "json_schema"} if kind == "json_schema" else {"type"}, "response_format")
        if kind == "text":
            return None
        if kind == "json_object":
            return cls(json_object=True, frame=frame)
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), (dict, bool)):
            raise ValueError('response_format.json_schema: an object with "name" and "schema" (a JSON schema)')
        only_fields(spec, {"name", "description", "schema", "strict", "exact"}, "response_format.json_schema")
        for key in ("strict", "exact"):
            if spec.get(key) is not None and not isinstance(spec[key], bool):
                raise ValueError(f"response_format.json_schema.{key}: true or false")
        return cls(json=spec.get("schema", {}), frame=frame, exact=bool(spec.get("exact")),
                   enforced=spec.get("strict") is not False)

    @classmethod
    def from_tools(cls, tools: list[dict] | None, tool_choice, frame: str,
                   parallel: bool | None = None) -> "StructuredOutputs | None":
        """The constraint for a chat request's tools: "required" or a named function -> calls required
        (of that function only); "auto" or unset -> calls optional; "none" or no tools -> None.
        `parallel`: OpenAI's parallel_tool_calls (False: one call at most; True or None: any number)."""
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
        for n, p in specs:
            kinds = p.get("type", "object")
            if kinds != "object" and not (isinstance(kinds, list) and kinds == ["object"]):
                raise ValueError(f"tools: the parameters of {n!r} have type {kinds!r}; a function's parameters are "
                                 'an object schema ({"type": "object", "properties": ...}), as OpenAI requires: '
                                 "wrap a list or a value in a property")
        mode = "required" if name is not None or tool_choice == "required" else "auto"
        return cls(tools=specs, tool_mode=mode, frame=frame, max_calls=1 if parallel is False else None)


def constrains_calls(tools, tool_choice, shaped: bool) -> bool:
    """Whether a chat request's tool calls are enforced: with tools offered, always for "required" or a
    named function; for "auto" (or unset) unless another constraint (`shaped`) already shapes the answer."""
    return bool(tools) and tool_choice != "none" and not (shaped and tool_choice in (None, "auto"))
