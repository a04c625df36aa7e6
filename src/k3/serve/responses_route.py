"""POST /v1/responses: OpenAI's Responses API, for the part that maps onto chat completions.

Taken: `input` (a string, or items: messages with input_text/output_text/input_image parts,
function_call and function_call_output items), `instructions`, function `tools`, `tool_choice`,
`parallel_tool_calls`, `text.format` (text, json_object, json_schema), `reasoning.effort`,
`max_output_tokens`, `temperature`, `top_p`, `stream`, and the bookkeeping fields clients send (`user`,
`store`, `metadata`). Refused with a 400 naming them: built-in tools (web search, file search, ...),
`previous_response_id` and `conversation` (k3 keeps no responses), `background`. The request becomes a
ChatRequest, runs through chat_route (same grammar, same checks), and its answer or its SSE chunks are
written as Responses output items and events.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from k3.serve import chat_route
from k3.serve.protocol import ChatRequest, MAX_TOKENS_CAP, RequestError, Strict, StreamOptions
from k3.serve.responses_items import response
from k3.serve.responses_stream import EventWriter

REFUSED = {"previous_response_id": "k3 keeps no responses: send the whole conversation as `input`",
           "conversation": "k3 keeps no conversations: send the whole conversation as `input`",
           "background": "k3 answers in the foreground only", "prompt": "stored prompts are not kept by k3"}
PARTS = {"input_text": "text", "output_text": "text"}


class ResponsesRequest(Strict):
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_CAP)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    stream: bool = False
    user: str | None = None
    store: bool | None = None
    metadata: dict[str, Any] | None = None
    previous_response_id: str | None = None
    conversation: Any = None
    background: bool | None = None
    prompt: Any = None


def chat_request(req: ResponsesRequest) -> ChatRequest:
    """The equivalent chat completion request; a RequestError naming the field for what does not map."""
    for field, why in REFUSED.items():
        if getattr(req, field) not in (None, False):
            raise RequestError(f"{field}: {why}", field)
    messages = ([{"role": "system", "content": req.instructions}] if req.instructions else []) + _messages(req.input)
    effort = (req.reasoning or {}).get("effort")
    extra = {"reasoning_effort": effort} if effort in ("low", "medium", "high") else {}
    if req.reasoning and set(req.reasoning) - {"effort", "summary"}:
        raise RequestError(f"reasoning: unknown field(s) {sorted(set(req.reasoning) - {'effort', 'summary'})}",
                           "reasoning")
    return ChatRequest(model=req.model, messages=messages or [{"role": "user", "content": ""}],
                       tools=_tools(req.tools), tool_choice=_tool_choice(req.tool_choice),
                       parallel_tool_calls=req.parallel_tool_calls, response_format=_format(req.text),
                       max_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p,
                       stream=req.stream, **extra)


def _messages(items) -> list[dict]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict] = []
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role", "user"), "content": _content(item.get("content"), i)})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "{}")}}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output", "")})
        elif kind != "reasoning":       # earlier reasoning items: not fed back (K3 drops old thinking too)
            raise RequestError(f"input[{i}].type: {kind!r} is not taken (message, function_call, "
                               "function_call_output, reasoning)", "input")
    return out


def _content(content, i: int):
    if isinstance(content, str) or content is None:
        return content or ""
    parts = []
    for part in content:
        kind = part.get("type")
        if kind in PARTS:
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": part.get("image_url")}})
        else:
            raise RequestError(f"input[{i}].content: a part of type {kind!r} is not taken (input_text, "
                               "output_text, input_image)", "input")
    return parts


def _tools(tools):
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise RequestError(f"tools[{i}].type: {tool.get('type')!r}; k3 takes function tools (built-in tools "
                               "such as web search run on OpenAI's side)", "tools")
        fn = {k: v for k, v in tool.items() if k != "type"}
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice):
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _format(text):
    if not text:
        return None
    unknown = sorted(set(text) - {"format", "verbosity"})
    if unknown:
        raise RequestError(f"text: unknown field(s) {', '.join(unknown)}", "text")
    fmt = text.get("format")
    if fmt is None or fmt.get("type") in ("text", "json_object"):
        return fmt
    if fmt.get("type") != "json_schema":
        raise RequestError(f"text.format.type: text, json_object or json_schema, got {fmt.get('type')!r}", "text")
    spec = {k: v for k, v in fmt.items() if k != "type"}
    return {"type": "json_schema", "json_schema": spec}


async def create(server, req: ResponsesRequest, request=None) -> dict:
    return response(req, await chat_route.complete(server, chat_request(req), request))


async def stream(server, req: ResponsesRequest, request=None):
    """Responses streaming events from chat_route's chunks: created, output items and their deltas, completed."""
    chat = chat_request(req).model_copy(update={"stream": True, "stream_options": StreamOptions(include_usage=True)})
    chunks = await chat_route.stream(server, chat, request)
    return _events(req, chunks)


async def _events(req: ResponsesRequest, chunks):
    writer = EventWriter(req)
    for event in writer.start():
        yield event
    async for chunk in chunks:
        body = chunk[len("data: "):].strip()
        if body == "[DONE]":
            break
        for event in writer.feed(json.loads(body)):
            yield event
    for event in writer.finish():
        yield event
