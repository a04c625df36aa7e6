"""Responses API objects: the response and its output items (reasoning, message, function call), for the
answer (responses_route) and the stream's events (responses_stream) alike."""

from __future__ import annotations

import uuid


def response(req, completion: dict) -> dict:
    """A chat completion (one choice) as a Responses object; `req`: the ResponsesRequest it answers."""
    choice = completion["choices"][0]
    message, usage = choice["message"], completion["usage"]
    incomplete = choice["finish_reason"] == "length"
    out = {"id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": completion["created"],
           "status": "incomplete" if incomplete else "completed", "model": completion["model"],
           "output": output_items(message),
           "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None, "error": None,
           "instructions": req.instructions, "tools": req.tools or [], "tool_choice": req.tool_choice or "auto",
           "parallel_tool_calls": req.parallel_tool_calls is not False, "text": req.text or {"format": {"type": "text"}},
           "temperature": req.temperature, "top_p": req.top_p, "max_output_tokens": req.max_output_tokens,
           "metadata": req.metadata or {}, "usage": {
               "input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
               "total_tokens": usage["total_tokens"], "input_tokens_details": {"cached_tokens": 0},
               "output_tokens_details": {"reasoning_tokens": usage["completion_tokens_details"]["reasoning_tokens"]}}}
    if "warning" in choice:
        out["warning"] = choice["warning"]
    if choice["finish_reason"] == "invalid":
        out["status"], out["error"] = "failed", {"code": "invalid_output", "message": choice.get("warning", "")}
    return out


def output_items(message: dict) -> list[dict]:
    """A chat message (OpenAI's shape, with k3's reasoning_content) as output items, in order."""
    items = [item("reasoning", message["reasoning_content"])] if message.get("reasoning_content") else []
    if message.get("content"):
        items.append(item("message", message["content"]))
    return items + [function_call(c["id"], c["function"]["name"], c["function"]["arguments"])
                    for c in message.get("tool_calls") or []]


def item(kind: str, text: str = "") -> dict:
    """A reasoning or message item holding `text`."""
    if kind == "reasoning":
        return {"type": "reasoning", "id": f"rs_{uuid.uuid4().hex}", "status": "completed", "summary": [],
                "content": [{"type": "reasoning_text", "text": text}]}
    return {"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def function_call(call_id: str | None, name: str, arguments: str = "") -> dict:
    return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}
