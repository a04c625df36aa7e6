"""Chat completion chunks -> the Responses API's streaming events (responses_route.stream).

Each output item (reasoning, the message, each function call) is announced with
`response.output_item.added`, grows by deltas (`response.reasoning_text.delta`,
`response.output_text.delta`, `response.function_call_arguments.delta`) and ends with its `.done`
events; the stream opens with `response.created` and `response.in_progress` and ends with
`response.completed` (or `.incomplete` when max_output_tokens cut it, `.failed` on an error or an
output that fails its schema), carrying the whole response. Every event has a `sequence_number`.
"""

from __future__ import annotations

import json
import time
import uuid

from k3.chat.events import CUT_CALL
from k3.serve.responses_items import function_call, item, response


class EventWriter:
    def __init__(self, req):
        self.req, self.seq = req, 0
        self.id, self.created = f"resp_{uuid.uuid4().hex}", int(time.time())
        self.items: list[dict] = []          # output items, in order
        self.open: dict | None = None        # the reasoning or message item growing now
        self.calls: dict[int, dict] = {}     # chat tool-call index -> its function_call item
        self.reason, self.usage, self.error, self.warning = None, None, None, None

    def _event(self, kind: str, **fields) -> str:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n"

    def _response(self, status: str) -> dict:
        completion = {"choices": [{"message": {}, "finish_reason": self.reason or "stop"}], "created": self.created,
                      "model": self.req.model, "usage": self.usage or _no_usage()}
        out = response(self.req, completion) | {"id": self.id, "status": status, "output": self.items}
        if self.warning:
            out["warning"] = self.warning
        if status == "failed":
            out["error"] = self.error or {"code": "invalid_output", "message": self.warning or ""}
        return out

    def start(self) -> list[str]:
        return [self._event("response.created", response=self._response("in_progress")),
                self._event("response.in_progress", response=self._response("in_progress"))]

    def feed(self, chunk: dict) -> list[str]:
        if "error" in chunk:
            self.error = {"code": "server_error", "message": chunk["error"].get("message", "")}
            return []
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        events = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                events += self._text("reasoning", delta["reasoning_content"])
            if delta.get("content"):
                events += self._text("message", delta["content"])
            for call in delta.get("tool_calls") or []:
                events += self._call(call)
            if choice.get("finish_reason"):
                self.reason, self.warning = choice["finish_reason"], choice.get("warning")
        return events

    def _text(self, kind: str, text: str) -> list[str]:
        events = []
        if self.open is None or self.open["type"] != kind:
            events += self._close()
            self.open = item(kind)
            self.items.append(self.open)
            events.append(self._event("response.output_item.added", output_index=len(self.items) - 1,
                                      item=self.open | {"status": "in_progress"}))
            if kind == "message":
                events.append(self._event("response.content_part.added", item_id=self.open["id"],
                                          output_index=len(self.items) - 1, content_index=0,
                                          part={"type": "output_text", "text": "", "annotations": []}))
        self.open["content"][0]["text"] += text
        name = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        return events + [self._event(name, item_id=self.open["id"], output_index=len(self.items) - 1,
                                     content_index=0, delta=text)]

    def _call(self, call: dict) -> list[str]:
        events = []
        if call["index"] not in self.calls:
            events += self._close()
            added = function_call(call.get("id"), call["function"]["name"])
            self.calls[call["index"]] = added
            self.items.append(added)
            events.append(self._event("response.output_item.added", output_index=len(self.items) - 1,
                                      item=added | {"status": "in_progress"}))
        growing = self.calls[call["index"]]
        piece = call["function"].get("arguments") or ""
        if piece:
            growing["arguments"] += piece
            events.append(self._event("response.function_call_arguments.delta", item_id=growing["id"],
                                      output_index=self.items.index(growing), delta=piece))
        return events

    def _close(self) -> list[str]:
        """The .done events of the reasoning or message item growing now."""
        if self.open is None:
            return []
        done, index, self.open = self.open, self.items.index(self.open), None
        text = done["content"][0]["text"]
        if done["type"] == "reasoning":
            return [self._event("response.reasoning_text.done", item_id=done["id"], output_index=index,
                                content_index=0, text=text),
                    self._event("response.output_item.done", output_index=index, item=done)]
        return [self._event("response.output_text.done", item_id=done["id"], output_index=index, content_index=0,
                            text=text),
                self._event("response.content_part.done", item_id=done["id"], output_index=index, content_index=0,
                            part=done["content"][0]),
                self._event("response.output_item.done", output_index=index, item=done)]

    def finish(self) -> list[str]:
        events = self._close()
        for call in self.calls.values():
            index = self.items.index(call)
            events += [self._event("response.function_call_arguments.done", item_id=call["id"], output_index=index,
                                   arguments=call["arguments"]),
                       self._event("response.output_item.done", output_index=index, item=call)]
        if self.reason == "length":
            cut = self.warning and CUT_CALL in self.warning   # chat's cut_warning: the stream's last call
            calls = [i for i in self.items if i["type"] == "function_call"]
            if cut and calls:            # a call the output ended inside is never returned as a call
                self.items.remove(calls[-1])
            return events + [self._event("response.incomplete", response=self._response("incomplete"))]
        if self.error or self.reason in ("error", "invalid"):
            return events + [self._event("response.failed", response=self._response("failed"))]
        return events + [self._event("response.completed", response=self._response("completed"))]


def _no_usage() -> dict:
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
            "completion_tokens_details": {"reasoning_tokens": 0}}
