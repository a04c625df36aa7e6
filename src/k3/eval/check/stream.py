"""One streamed chat completion put back together: reasoning, content and tool calls from the deltas, with
each token-bearing chunk's arrival recorded as `k3 bench` records it (first token, first visible token)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from inspect_ai.model import ChatMessageAssistant, ContentReasoning, ContentText
from inspect_ai.tool import ToolCall

from k3.bench.records import RequestRecord


@dataclass
class Reply:
    content: str = ""
    reasoning: str = ""
    calls: dict[int, dict] = field(default_factory=dict)
    finish_reason: str | None = None
    done: bool = False           # [DONE] seen: the answer is whole

    def feed(self, data: str, record: RequestRecord, now: float) -> bool:
        """One `data:` payload; True at [DONE]. A malformed chunk ends the stream as the record's error."""
        if data == "[DONE]":
            record.end = record.end or now
            self.done = True
            return True
        try:
            chunk = json.loads(data)
        except ValueError:
            record.error = f"malformed stream chunk: {data[:80]!r}"
            return True
        if chunk.get("error"):
            record.error = str(chunk["error"].get("message", chunk["error"]))[:300]
            return True
        usage = chunk.get("usage") or {}
        record.prompt_tokens = usage.get("prompt_tokens", record.prompt_tokens)
        if usage.get("completion_tokens") is not None:
            record.output_tokens = usage["completion_tokens"]
        for choice in chunk.get("choices") or []:
            self._delta(choice, record, now)
        return False

    def _delta(self, choice: dict, record: RequestRecord, now: float) -> None:
        d = choice.get("delta") or {}
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        reasoning, content = d.get("reasoning_content") or d.get("reasoning") or "", d.get("content") or ""
        self.reasoning += reasoning
        self.content += content
        for tc in d.get("tool_calls") or []:
            call = self.calls.setdefault(tc.get("index", 0), {"id": None, "name": "", "arguments": ""})
            call["id"] = call["id"] or tc.get("id")
            fn = tc.get("function") or {}
            call["name"] += fn.get("name") or ""
            call["arguments"] += fn.get("arguments") or ""
        visible = bool(content or d.get("tool_calls"))
        if visible or reasoning:
            record.token_chunk(now, visible)

    def message(self) -> ChatMessageAssistant:
        content: list = [ContentReasoning(reasoning=self.reasoning)] if self.reasoning else []
        if self.content or not content:
            content.append(ContentText(text=self.content))
        calls = []
        for i, c in sorted(self.calls.items()):
            try:
                args, error = json.loads(c["arguments"] or "{}"), None
            except ValueError:
                args, error = {}, f"arguments are not JSON: {c['arguments'][:200]}"
            calls.append(ToolCall(id=c["id"] or f"call_{i}", function=c["name"], arguments=args if isinstance(args, dict)
                                  else {}, parse_error=error))
        return ChatMessageAssistant(content=content, tool_calls=calls or None, source="generate")
