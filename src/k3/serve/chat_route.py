"""POST /v1/chat/completions: render with k3.chat, generate, parse; SSE streaming or one response."""

from __future__ import annotations

import json
import time
import uuid

from fastapi import HTTPException

from k3.chat import (ContentDelta, MessageParser, ReasoningDelta, ToolCallDelta, ToolCallStart, parse_message,
                     render)
from k3.engine.request import SamplingParams
from k3.serve.protocol import ChatRequest

DEFAULT_MAX_TOKENS = 1024


def sampling(req, n_index: int = 0, logprobs: int | None = None, max_tokens: int | None = None) -> SamplingParams:
    stop = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    return SamplingParams(max_tokens=max_tokens or req.max_tokens or DEFAULT_MAX_TOKENS, temperature=req.temperature,
                          top_p=req.top_p, top_k=req.top_k, min_p=req.min_p,
                          seed=None if req.seed is None else req.seed + n_index, stop=tuple(stop),
                          presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
                          repetition_penalty=req.repetition_penalty, logprobs=logprobs, ignore_eos=req.ignore_eos)


def prompt_ids(req: ChatRequest, tokenizer) -> tuple[list[int], bool]:
    thinking = bool((req.chat_template_kwargs or {}).get("thinking", True))
    tools, choice = req.tools, req.tool_choice
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        tools = [t for t in tools or [] if (t.get("function") or t).get("name") == name]
        if not tools:
            raise HTTPException(400, f"tool_choice names {name!r}, which is not among the request's tools")
        choice = "required"
    segments = render(req.messages, tools=tools, thinking=thinking, thinking_effort=req.reasoning_effort,
                      tool_choice=choice, response_format=req.response_format)
    return tokenizer.encode_segments(segments), thinking


def finish_reason(out, message) -> str:
    if out.finish_reason == "length":
        return "length"
    return "tool_calls" if message.tool_calls else "stop"


def usage(prompt_len: int, outs, tokenizer, reasoning_texts) -> dict:
    completion = sum(len(o.token_ids) for o in outs)
    reasoning = sum(len(tokenizer.encode(t)) for t in reasoning_texts)
    return {"prompt_tokens": prompt_len, "completion_tokens": completion, "total_tokens": prompt_len + completion,
            "completion_tokens_details": {"reasoning_tokens": reasoning}}


async def complete(server, req: ChatRequest) -> dict:
    ids, thinking = prompt_ids(req, server.tokenizer)
    max_tokens = req.max_completion_tokens or req.max_tokens
    top = (req.top_logprobs or 0) if req.logprobs else None
    outs = await server.run_all(ids, [sampling(req, i, logprobs=top, max_tokens=max_tokens) for i in range(req.n)])
    messages = [parse_message(server.tokenizer, o.token_ids, thinking=thinking) for o in outs]
    choices = [{"index": i, "message": m.to_openai(), "finish_reason": finish_reason(o, m),
                "logprobs": _chat_logprobs(server.tokenizer, o) if req.logprobs else None}
               for i, (o, m) in enumerate(zip(outs, messages))]
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": server.model_name, "choices": choices,
            "usage": usage(len(ids), outs, server.tokenizer, [m.reasoning_content for m in messages])}


async def stream(server, req: ChatRequest):
    """SSE chunks: role, then reasoning/content/tool-call deltas, then the finish reason, [usage], [DONE]."""
    ids, thinking = prompt_ids(req, server.tokenizer)
    params = sampling(req, 0, max_tokens=req.max_completion_tokens or req.max_tokens)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": server.model_name}
    generator = server.engine.generate(ids, params)
    first = await anext(generator)          # surfaces 429/400 before the 200 is sent
    return _sse(server, head, ids, thinking, req, first, generator)


async def _sse(server, head, ids, thinking, req, first, generator):
    parser = MessageParser(server.tokenizer, thinking=thinking)

    def chunk(delta: dict, reason=None, **extra) -> str:
        return "data: " + json.dumps(head | {"choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
                                     | extra) + "\n\n"

    yield chunk({"role": "assistant", "content": ""})
    out = first
    while True:
        for token in out.new_token_ids:
            for event in parser.feed(token):
                delta = _delta(event)
                if delta:
                    yield chunk(delta)
        if out.finished:
            break
        out = await anext(generator)
    message = parser.finish()
    if out.finish_reason == "error":
        yield "data: " + json.dumps({"error": {"message": out.error, "type": "server_error", "code": 500}}) + "\n\n"
    yield chunk({}, finish_reason(out, message))
    if req.stream_options and req.stream_options.include_usage:
        yield "data: " + json.dumps(head | {"choices": [], "usage": usage(len(ids), [out], server.tokenizer,
                                                                            [message.reasoning_content])}) + "\n\n"
    yield "data: [DONE]\n\n"


def _chat_logprobs(tokenizer, out) -> dict:
    def entry(token_id: int, logprob: float) -> dict:
        raw = tokenizer.token_bytes([token_id])
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}

    return {"content": [entry(lp.token_id, lp.logprob) | {"top_logprobs": [entry(t, v) for t, v in lp.top.items()]}
                        for lp in out.logprobs]}


def _delta(event) -> dict | None:
    if isinstance(event, ReasoningDelta):
        return {"reasoning_content": event.text}
    if isinstance(event, ContentDelta):
        return {"content": event.text}
    if isinstance(event, ToolCallStart):
        return {"tool_calls": [{"index": event.index, "id": event.id, "type": "function",
                                "function": {"name": event.name, "arguments": ""}}]}
    if isinstance(event, ToolCallDelta):
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.arguments}}]}
    return None
