"""Builds one tool call while its XTML streams in, emitting JSON argument fragments as they arrive.

Fragments of a call concatenate to JSON text of its arguments object; the final `arguments` are
re-serialised from the typed values (so they may differ in spacing from the streamed text).
"""

from __future__ import annotations

import json

from k3.chat.events import ToolCall, ToolCallDelta, ToolCallEnd, ToolCallStart

TYPES = ("string", "number", "boolean", "null", "object", "array")


class CallBuilder:
    def __init__(self, index: int, call_id: str, name: str, problems: list[str]):
        self.index, self.id, self.name = index, call_id, name
        self.problems = problems
        self.args: dict = {}
        self.raw: list[str] | None = None        # text of a <json> block, when the model wrote one
        self.arg: tuple[str, str, list[str]] | None = None   # (key, type, value parts) being read
        self.opened = False                      # "{" emitted

    def start(self) -> ToolCallStart:
        return ToolCallStart(self.index, self.id, self.name)

    def open_argument(self, key: str, kind: str) -> list:
        if kind not in TYPES:
            self.problems.append(f"tool call {self.name!r}: argument {key!r} has unknown type {kind!r}; read as string")
            kind = "string"
        self.arg = (key, kind, [])
        prefix = ", " if self.opened else "{"
        self.opened = True
        quote = '"' if kind == "string" else ""
        return [ToolCallDelta(self.index, f"{prefix}{json.dumps(key, ensure_ascii=False)}: {quote}")]

    def text(self, text: str) -> list:
        if self.arg is not None:
            self.arg[2].append(text)
            frag = json.dumps(text, ensure_ascii=False)[1:-1] if self.arg[1] == "string" else text
            return [ToolCallDelta(self.index, frag)]
        if self.raw is not None:
            self.raw.append(text)
            return [ToolCallDelta(self.index, text)]
        self.problems.append(f"tool call {self.name!r}: text outside any argument: {text!r}")
        return []

    def open_json(self) -> None:
        self.raw = []

    def close_argument(self) -> list:
        if self.arg is None:
            return []
        key, kind, parts = self.arg
        self.arg = None
        value = "".join(parts)
        if kind != "string":
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                self.problems.append(f"tool call {self.name!r}: argument {key!r} is not valid {kind}: {value!r}")
        self.args[key] = value
        return [ToolCallDelta(self.index, '"')] if kind == "string" else []

    def finish(self) -> tuple[ToolCall, list]:
        events = self.close_argument()
        if self.raw is not None:
            arguments = "".join(self.raw)
            parsed = _json_object(arguments)
            if parsed is None:
                self.problems.append(f"tool call {self.name!r}: <json> arguments are not a JSON object")
            else:
                arguments = json.dumps({**parsed, **self.args}, ensure_ascii=False)
        else:
            arguments = json.dumps(self.args, ensure_ascii=False)
            events.append(ToolCallDelta(self.index, "}" if self.opened else "{}"))
        return ToolCall(self.id, self.name, arguments), events + [ToolCallEnd(self.index)]


def _json_object(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
