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
        from k3.serve.responses_route import response

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
            self.open = _item(kind)
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
            item = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": call.get("id"),
                    "name": call["function"]["name"], "arguments": "", "status": "completed"}
            self.calls[call["index"]] = item
            self.items.append(item)
            events.append(self._event("response.output_item.added", output_index=len(self.items) - 1,
                                      item=item | {"status": "in_progress"}))
        item = self.calls[call["index"]]
        piece = call["function"].get("arguments") or ""
        if piece:
            item["arguments"] += piece
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=self.items.index(item), delta=piece))
        return events

    def _close(self) -> list[str]:
        """The .done events of the reasoning or message item growing now."""
        if self.open is None:
            return []
        item, index, self.open = self.open, self.items.index(self.open), None
        text = item["content"][0]["text"]
        if item["type"] == "reasoning":
            return [self._event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                content_index=0, text=text),
                    self._event("response.output_item.done", output_index=index, item=item)]
        return [self._event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                            text=text),
                self._event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                            part=item["content"][0]),
                self._event("response.output_item.done", output_index=index, item=item)]

    def finish(self) -> list[str]:
        events = self._close()
        for item in self.calls.values():
            index = self.items.index(item)
            events += [self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                   arguments=item["arguments"]),
                       self._event("response.output_item.done", output_index=index, item=item)]
        if self.reason == "length":
            cut = self.warning and CUT_CALL in self.warning   # chat's cut_warning: the stream's last call
            calls = [i for i in self.items if i["type"] == "function_call"]
            if cut and calls:            # a call the output ended inside is never returned as a call
                self.items.remove(calls[-1])
            return events + [self._event("response.incomplete", response=self._response("incomplete"))]
        if self.error or self.reason in ("error", "invalid"):
            return events + [self._event("response.failed", response=self._response("failed"))]
        return events + [self._event("response.completed", response=self._response("completed"))]


def _item(kind: str) -> dict:
    if kind == "reasoning":
        return {"type": "reasoning", "id": f"rs_{uuid.uuid4().hex}", "status": "completed", "summary": [],
                "content": [{"type": "reasoning_text", "text": ""}]}
    return {"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "", "annotations": []}]}


def _no_usage() -> dict:
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
            "completion_tokens_details": {"reasoning_tokens": 0}}
