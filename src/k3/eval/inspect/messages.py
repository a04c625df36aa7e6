"""Inspect AI's chat messages and tools <-> k3's chat format (OpenAI-shaped dicts with `reasoning_content`).

Reasoning is carried both ways: an assistant message's ContentReasoning goes back to the model as
`reasoning_content` (K3's format keeps earlier thinking), and the parser's reasoning comes out as
ContentReasoning. Images (ContentImage: a data: URL or a file) in user messages go as `image_url` parts, in
their place; audio, video and documents are refused with a clear error rather than silently stripped."""

from __future__ import annotations

import json

from inspect_ai.model import ChatMessage, ChatMessageAssistant, ContentReasoning, ContentText
from inspect_ai.tool import ToolCall, ToolInfo


def to_k3(messages: list[ChatMessage]) -> list[dict]:
    return [_message(m) for m in messages]


def _message(m: ChatMessage) -> dict:
    parts = m.content if isinstance(m.content, list) else []
    allowed = ("text", "reasoning", "image") if m.role == "user" else ("text", "reasoning")
    if any(getattr(p, "type", "text") not in allowed for p in parts):
        raise ValueError(f"a {m.role} message holds {', '.join(sorted({p.type for p in parts}))} content; k3's chat "
                         "format takes text (and reasoning), and images in user messages")
    out: dict = {"role": m.role, "content": _text(m)}
    if any(getattr(p, "type", None) == "image" for p in parts):
        out["content"] = [{"type": "image_url", "image_url": {"url": p.image}} if p.type == "image"
                          else {"type": "text", "text": p.text} for p in parts if p.type in ("image", "text")]
    if m.role == "assistant":
        reasoning = "".join(p.reasoning for p in parts if isinstance(p, ContentReasoning))
        if reasoning:
            out["reasoning_content"] = reasoning
        if m.tool_calls:
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.function, "arguments": json.dumps(c.arguments)}}
                                 for c in m.tool_calls]
    elif m.role == "tool":
        out["tool_call_id"] = m.tool_call_id or ""
        if m.error is not None:
            out["content"] = f"error: {m.error.message}"
    return out


def _text(m: ChatMessage) -> str:
    if isinstance(m.content, str):
        return m.content
    return "".join(p.text for p in m.content if isinstance(p, ContentText))


def tools_to_k3(tools: list[ToolInfo]) -> list[dict]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.parameters.model_dump(exclude_none=True)}}
            for t in tools]


def tool_choice_to_k3(choice) -> str | dict | None:
    """Inspect's "auto" / "any" / "none" / ToolFunction(name) -> OpenAI's auto / required / none / named."""
    if choice is None or isinstance(choice, str):
        return {"any": "required"}.get(choice, choice)
    return {"type": "function", "function": {"name": choice.name}}


def from_k3(message) -> ChatMessageAssistant:
    """k3's ParsedMessage -> Inspect's assistant message (reasoning first, as the model wrote it)."""
    content: list = []
    if message.reasoning_content:
        content.append(ContentReasoning(reasoning=message.reasoning_content))
    if message.content or not content:
        content.append(ContentText(text=message.content))
    calls = []
    for c in message.tool_calls:
        args = c.arguments_json()
        calls.append(ToolCall(id=c.id, function=c.name, arguments=args if args is not None else {},
                              parse_error=None if args is not None else f"arguments are not a JSON object: {c.arguments[:200]}"))
    return ChatMessageAssistant(content=content, tool_calls=calls or None, source="generate")
