"""POST /v1/chat/completions: render with k3.chat, generate, parse; SSE streaming or one response."""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid

from fastapi import HTTPException

from k3.chat import (ContentDelta, MessageParser, ReasoningDelta, ToolCallDelta, ToolCallStart, parse_message,
                     render)
from k3.chat.tools import tool_name, tool_names
from k3.chat.validate import check_tool_choice, check_tool_names, check_tools
from k3.engine.request import SamplingParams
from k3.engine.structured.check import output_problem
from k3.serve.protocol import ChatRequest, RequestError
from k3.serve.structured import request_constraint
from k3.serve.sse import first_outputs, interleaved, next_output, started

DEFAULT_MAX_TOKENS = 1024


def sampling(req, n_index: int = 0, logprobs: int | None = None, max_tokens: int | None = None,
             structured=None) -> SamplingParams:
    refuse_unsupported(req)
    stop = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    return SamplingParams(max_tokens=max_tokens or req.max_tokens or DEFAULT_MAX_TOKENS, temperature=req.temperature,
                          top_p=req.top_p, top_k=req.top_k, min_p=req.min_p,
                          seed=None if req.seed is None else req.seed + n_index, stop=tuple(stop),
                          presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
                          repetition_penalty=req.repetition_penalty, logprobs=logprobs, ignore_eos=req.ignore_eos,
                          structured_outputs=structured, logit_bias=logit_bias(req.logit_bias))


def logit_bias(bias: dict | None) -> dict | None:
    """OpenAI's {"token id": bias} -> {id: bias}; a key that is not a token id is a 400 naming it."""
    if not bias:
        return None
    out = {}
    for key, value in bias.items():
        if not key.strip().isdigit():
            raise RequestError(f"logit_bias: keys are token ids, got {key!r}", "logit_bias")
        out[int(key)] = value
    return out


def refuse_unsupported(req) -> None:
    """Fields whose meaning k3 does not implement: a 400 naming each, never a 200 that ignored it."""
    if req.best_of is not None and req.best_of != req.n:
        raise RequestError("best_of is not supported (k3 returns every sampled choice): use n, and pick among them",
                           "best_of")
    if req.suffix:
        raise RequestError("suffix (insertion) is not supported by K3's completions", "suffix")
    if req.speculative_config is not None:
        raise RequestError("speculative decoding is set when the server starts (k3 serve --speculative-config JSON), "
                           "not per request", "speculative_config")


THINKING_KEYS = ("thinking", "enable_thinking")   # k3's name, and the one vLLM's users send
# vLLM's request fields that change how the prompt is rendered: a 400 unless left at their defaults
TEMPLATE_FIELDS = {"chat_template": None, "add_generation_prompt": True, "continue_final_message": False}


def thinking_on(req: ChatRequest, default: bool = True) -> bool:
    """Whether the answer opens with a think channel: chat_template_kwargs' `thinking` or `enable_thinking`
    (true or false; both may be given when they agree); the model's default (its tokenizer_config.json)
    when neither is."""
    kwargs = req.chat_template_kwargs or {}
    unknown = sorted(set(kwargs) - set(THINKING_KEYS))
    if unknown:
        raise RequestError(f"chat_template_kwargs: {', '.join(map(repr, unknown))} not understood; K3's chat format "
                           "takes thinking (or enable_thinking) alone, and a key left unread would change nothing "
                           "you meant", "chat_template_kwargs")
    for field, unchanged in TEMPLATE_FIELDS.items():
        if getattr(req, field) != unchanged:
            raise RequestError(f"{field}: k3 renders K3's own chat format, always ending with the assistant's turn "
                               "to answer; leave it out", field)
    given = {k: kwargs[k] for k in THINKING_KEYS if k in kwargs}
    if any(not isinstance(v, bool) for v in given.values()):
        raise RequestError("chat_template_kwargs: thinking / enable_thinking take true or false", "chat_template_kwargs")
    if len(set(given.values())) > 1:
        raise RequestError("chat_template_kwargs: thinking and enable_thinking disagree; give one",
                           "chat_template_kwargs")
    return next(iter(given.values()), default)


def prompt_ids(req: ChatRequest, tokenizer, check_text_size=None, images: list | None = None) -> tuple[list[int], dict]:
    """The prompt's token ids, and the parser options that match it (thinking, the tools offered).
    check_text_size(bytes) may refuse the rendered prompt before it is tokenized. images: the request's
    prepared images (Server.prepare_images), whose blocks take the image parts' places."""
    thinking = thinking_on(req, tokenizer.thinking)
    tools, choice = req.tools, req.tool_choice
    check_tools(tools)
    name = check_tool_choice(choice)
    if name is not None:
        tools = [t for t in tools or [] if tool_name(t) == name]
        if not tools:
            raise HTTPException(400, f"tool_choice names {name!r}, which is not among the request's tools")
        choice = "required"
    segments = render(req.messages, tools=tools, thinking=thinking, thinking_effort=req.reasoning_effort,
                      tool_choice=choice, response_format=req.response_format, images=images)
    check_tool_names(req.tools, req.messages)      # after render, which checks their shapes
    if check_text_size is not None:   # image blocks are one pad name a row: counted as the tokens they are
        check_text_size(sum(len(seg.text.encode()) for seg in segments if not seg.special))
    return tokenizer.encode_segments(segments), {"thinking": thinking, "tools": tool_names(tools)}


def admitted(server, req: ChatRequest, images: list | None) -> tuple[list[int], dict, list[SamplingParams], list | None]:
    """Prompt ids, parser options, one SamplingParams per choice (within the server's max_model_len), and
    the images (prepared in the image pool: Server.images)."""
    thinking = thinking_on(req, server.tokenizer.thinking)
    check_tools(req.tools)
    structured = request_constraint(req, "think" if thinking else "response")   # its 400 names the field
    ids, options = prompt_ids(req, server.tokenizer, server.check_text_size, images)
    asked = req.max_completion_tokens or req.max_tokens
    room = server.check_length(len(ids), asked)
    max_tokens = asked or min(DEFAULT_MAX_TOKENS, room)
    top = (req.top_logprobs or 0) if req.logprobs else None
    return ids, options, [sampling(req, i, logprobs=top, max_tokens=max_tokens, structured=structured)
                          for i in range(req.n)], images


RESAMPLES = 2   # fresh tries for a non-streamed choice whose output fails its schema (check.py)


def problem(so, out, message) -> str | None:
    """Why a finished chat answer breaks its whole schema (JSON answer or tool calls), or None."""
    if so is None or out.finish_reason != "stop":
        return None
    return output_problem(so, message.content, message.tool_calls)


def finish(out, message, so=None, broken: str | None = None) -> dict:
    """A choice's `finish_reason` and, when there is something to say, its `warning` (k3's, beside OpenAI's).
    The reason is OpenAI's; "error" (as the engine says it) when generation failed, so a failed stream never
    ends claiming a normal stop; "invalid" when the answer fails its schema (`broken`: problem(), worked out
    once by the caller; check.py: never returned as valid), unless the schema was not enforced (`strict:
    false`: only the warning says so). The warning names a grammar or a tool call that max_tokens cut, and
    an answer that fails its schema."""
    if out.finish_reason in ("length", "error", "invalid"):
        reason = out.finish_reason
    elif broken and so.enforced:
        reason = "invalid"
    else:
        reason = "tool_calls" if any(c.complete for c in message.tool_calls) else "stop"
    lines = [w for w in (out.warning, message.cut_warning(),
                         broken and f"the answer does not validate against its schema: {broken}") if w]
    return {"finish_reason": reason, **({"warning": "; ".join(lines)} if lines else {})}


def usage(prompt_len: int, outs, tokenizer, reasoning_texts) -> dict:
    completion = sum(len(o.token_ids) for o in outs)
    reasoning = sum(len(tokenizer.encode(t)) for t in reasoning_texts)
    return {"prompt_tokens": prompt_len, "completion_tokens": completion, "total_tokens": prompt_len + completion,
            "completion_tokens_details": {"reasoning_tokens": reasoning}}


async def complete(server, req: ChatRequest, request=None) -> dict:
    images = await server.images(req.messages)          # in the image pool, bounded: a 429 when it is saturated
    ids, options, params, images = await asyncio.to_thread(admitted, server, req, images)   # off the loop
    outs = await server.run_all(ids, params, request, images=images)
    messages = [parse_message(server.tokenizer, o.token_ids, **options) for o in outs]
    so = params[0].structured_outputs
    broken = [problem(so, o, m) for o, m in zip(outs, messages)]
    for attempt in range(1, RESAMPLES + 1):      # choices that fail their schema are sampled again
        failed = [i for i, b in enumerate(broken) if b and so.enforced]
        if not failed:
            break
        again = await server.run_all(ids, [_reseeded(params[i], attempt) for i in failed], request, images=images)
        for i, o in zip(failed, again):
            outs[i], messages[i] = o, parse_message(server.tokenizer, o.token_ids, **options)
            broken[i] = problem(so, outs[i], messages[i])
    choices = [{"index": i, "message": m.to_openai(), **finish(o, m, so, b),
                "logprobs": _chat_logprobs(server.tokenizer, o) if req.logprobs else None}
               for i, (o, m, b) in enumerate(zip(outs, messages, broken))]
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": server.model_name, "choices": choices,
            "usage": usage(len(ids), outs, server.tokenizer, [m.reasoning_content for m in messages])}


async def stream(server, req: ChatRequest, request=None):
    """SSE chunks per choice: role, then reasoning/content/tool-call deltas, then the finish reason;
    then [usage] and [DONE]. With n > 1 the choices' chunks interleave, each tagged with its index."""
    images = await server.images(req.messages)
    ids, options, params, images = await asyncio.to_thread(admitted, server, req, images)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": server.model_name}
    with server.engine.reserve(len(params)) as ticket:    # every choice, or a 429 for the request
        generators = [server.engine.generate(ids, p, ticket=ticket, images=images) for p in params]
        firsts = await first_outputs(server, generators, request, ticket)
    return _sse(server, head, ids, options, req, firsts, generators, params[0].structured_outputs)


async def _sse(server, head, ids, options, req, firsts, generators, so=None):
    done: list = []       # each choice's (output, message)
    workers = [functools.partial(_choice, server, head, options, i, first, g, so)
               for i, (first, g) in enumerate(zip(firsts, generators))]
    async for chunk in interleaved(workers, done):
        yield chunk
    outs, messages = zip(*done)
    if req.stream_options and req.stream_options.include_usage:
        yield "data: " + json.dumps(head | {"choices": [], "usage": usage(len(ids), outs, server.tokenizer,
                                                                            [m.reasoning_content for m in messages])}) + "\n\n"
    yield "data: [DONE]\n\n"


async def _choice(server, head, options, index, first, generator, so, queue):
    """Streams one choice's chunks into `queue`; puts a non-string marker when done; returns (out, message).
    The parser's closing events are streamed too, so the chunks add up to the finished message."""
    parser = MessageParser(server.tokenizer, **options)

    def chunk(delta: dict, reason=None, logprobs=None, extra=None) -> str:
        choice = {"index": index, "delta": delta, "finish_reason": reason, **(extra or {})}
        if logprobs is not None:
            choice["logprobs"] = logprobs
        return "data: " + json.dumps(head | {"choices": [choice]}) + "\n\n"

    await queue.put(chunk({"role": "assistant", "content": ""}))
    deadline = time.monotonic() + server.request_timeout
    out, _ = await started(first, generator, deadline, server.request_timeout, queue)
    while True:
        for token in out.new_token_ids:
            for event in parser.feed(token):
                delta = _delta(event)
                if delta:
                    await queue.put(chunk(delta))
        if out.logprobs and out.new_token_ids:
            await queue.put(chunk({}, logprobs={"content": _chat_logprobs(server.tokenizer, out)["content"][-1:]}))
        if out.finished:
            break
        out, cut = await next_output(generator, out, deadline, server.request_timeout, queue)
        if cut:
            break
    for event in parser.close():
        delta = _delta(event)
        if delta:
            await queue.put(chunk(delta))
    message = parser.finish()
    if out.finish_reason == "error":
        await queue.put("data: " + json.dumps({"error": {"message": out.error, "type": "server_error", "code": 500}})
                        + "\n\n")
    end = finish(out, message, so, problem(so, out, message))
    await queue.put(chunk({}, end.pop("finish_reason"), extra=end))
    await queue.put((out, message))
    return out, message


def _reseeded(params: SamplingParams, attempt: int) -> SamplingParams:
    """The same request for a fresh try: another seed when one was given (greedy stays greedy)."""
    import dataclasses

    return dataclasses.replace(params, seed=None if params.seed is None else params.seed + 7919 * attempt)


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
