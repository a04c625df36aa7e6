"""What the XTML parser reports: streaming events, and the finished message in OpenAI's shape."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int          # 0-based position among this message's tool calls
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    arguments: str      # a fragment; a call's fragments concatenate to its JSON arguments text


@dataclass(frozen=True)
class ToolCallEnd:
    index: int


@dataclass(frozen=True)
class MessageEnd:
    pass


Event = ReasoningDelta | ContentDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | MessageEnd


CUT_CALL = "the output ended inside the tool call"   # how a warning starts that names a cut call


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str      # JSON text of an object (or the model's raw text when it was not valid JSON)
    complete: bool = True   # False: the output ended inside the call (max_tokens); the arguments hold what
                            # was generated, closed so they parse, and may lack required keys

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def arguments_json(self) -> dict | None:
        try:
            value = json.loads(self.arguments)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None


@dataclass
class ParsedMessage:
    reasoning_content: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    ended: bool = False   # saw <|end_of_msg|>

    def cut_warning(self) -> str | None:
        """A line for the API's `warning` when the output ended inside a tool call, else None."""
        cut = [c for c in self.tool_calls if not c.complete]
        return (f"{CUT_CALL} to {cut[0].name!r} (arguments so far: {cut[0].arguments!r}); it is not returned as a "
                "call: raise max_tokens") if cut else None

    def to_openai(self) -> dict:
        """The assistant message as OpenAI's chat API returns it (plus `reasoning_content`). A call the output
        ended inside is left out (cut_warning names it): a client must never run half a call."""
        calls = [c for c in self.tool_calls if c.complete]
        msg: dict = {"role": "assistant", "content": self.content or (None if calls else "")}
        if self.reasoning_content:
            msg["reasoning_content"] = self.reasoning_content
        if calls:
            msg["tool_calls"] = [c.to_openai() for c in calls]
        return msg
