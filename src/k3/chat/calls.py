"""Builds one tool call while its XTML streams in, emitting JSON argument fragments as they arrive.

The fragments of a call concatenate to exactly its final `arguments` text (nothing is re-serialised
afterwards). String arguments stream as they arrive, JSON-escaped. A typed argument (number, boolean,
null, object, array) is held until it closes, then sent as its canonical JSON; text that is not valid
JSON of its type is sent as a JSON string instead, with a problem, so the arguments always parse. A
`<json>` block (the renderer's form for arguments that were not a JSON object) is held too: a JSON
object is sent as it stands, anything else as the model's raw text (reported).
"""

from __future__ import annotations

import json

from k3.chat.events import ToolCall, ToolCallDelta, ToolCallEnd, ToolCallStart

TYPES = ("string", "number", "boolean", "null", "object", "array")
_PYTHON_TYPES = {"number": (int, float), "boolean": (bool,), "null": (type(None),), "object": (dict,), "array": (list,)}


def typed_value(text: str, kind: str) -> tuple[object, bool]:
    """(value, valid): the JSON value of `text` when it parses and is of `kind`, else the text itself."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text, False
    ok = isinstance(value, _PYTHON_TYPES[kind]) and not (kind == "number" and isinstance(value, bool))
    return (value, True) if ok else (text, False)


class CallBuilder:
    def __init__(self, index: int, call_id: str, name: str, problems: list[str]):
        self.index, self.id, self.name = index, call_id, name
        self.problems = problems
        self.keys: set[str] = set()
        self.sent: list[str] = []                 # every fragment emitted: their join is `arguments`
        self.raw: list[str] | None = None         # text of a <json> block being read
        self.arg: tuple[str, str, list[str]] | None = None   # (key, type, value parts) being read
        self.opened = False                       # "{" sent: an arguments object is under way
        self.whole = False                        # a <json> block gave the whole arguments text
        self.cut = False                          # the output ended inside this call

    def start(self) -> ToolCallStart:
        return ToolCallStart(self.index, self.id, self.name)

    def _send(self, text: str) -> list:
        if not text:
            return []
        self.sent.append(text)
        return [ToolCallDelta(self.index, text)]

    def _member(self, key: str) -> str:
        """The text that opens one more member of the arguments object."""
        if key in self.keys:
            self.problems.append(f"tool call {self.name!r}: argument {key!r} given twice (the last one counts)")
        self.keys.add(key)
        prefix = ", " if self.opened else "{"
        self.opened = True
        return f"{prefix}{json.dumps(key, ensure_ascii=False)}: "

    def open_argument(self, key: str, kind: str) -> list:
        if self.whole:
            self.problems.append(f"tool call {self.name!r}: argument {key!r} after a <json> block; ignored")
            self.arg = (key, "ignored", [])
            return []
        if kind not in TYPES:
            self.problems.append(f"tool call {self.name!r}: argument {key!r} has unknown type {kind!r}; read as string")
            kind = "string"
        self.arg = (key, kind, [])
        return self._send(self._member(key) + ('"' if kind == "string" else ""))

    def text(self, text: str) -> list:
        if self.arg is not None:
            self.arg[2].append(text)
            return self._send(json.dumps(text, ensure_ascii=False)[1:-1]) if self.arg[1] == "string" else []
        if self.raw is not None:
            self.raw.append(text)
            return []
        if text.strip():
            self.problems.append(f"tool call {self.name!r}: text outside any argument: {text!r}")
        return []

    def open_json(self) -> None:
        self.raw = []

    def close_argument(self) -> list:
        if self.arg is None:
            return []
        key, kind, parts = self.arg
        self.arg = None
        if kind == "ignored":
            return []
        if kind == "string":
            return self._send('"')
        value, valid = typed_value("".join(parts), kind)
        if not valid:
            self.problems.append(f"tool call {self.name!r}: argument {key!r} is not valid {kind}: {value!r} "
                                 "(sent as a string)")
        return self._send(json.dumps(value, ensure_ascii=False))

    def close_json(self) -> list:
        if self.raw is None:
            return []
        text, self.raw = "".join(self.raw), None
        if self.whole:
            self.problems.append(f"tool call {self.name!r}: a second <json> block; ignored")
            return []
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            self.problems.append(f"tool call {self.name!r}: <json> arguments are not a JSON object")
            if self.opened:
                return []
            self.whole = True
            return self._send(text)
        if not self.opened and not self.whole:
            self.whole = True
            return self._send(json.dumps(value, ensure_ascii=False))
        return self._send("".join(self._member(k) + json.dumps(v, ensure_ascii=False) for k, v in value.items()))

    def finish(self) -> tuple[ToolCall, list]:
        events = self.close_argument() + self.close_json()
        if not self.whole:
            events += self._send("}" if self.opened else "{}")
        call = ToolCall(self.id, self.name, "".join(self.sent), complete=not self.cut)
        return call, events + [ToolCallEnd(self.index)]
