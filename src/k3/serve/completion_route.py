"""POST /v1/completions: a text (or token-id) prompt, one response or an SSE stream of text deltas.

The prompt's length is checked against the server's max_model_len before and after tokenizing (a
400, never a run until the timeout). With echo and logprobs, the prompt is scored too (what
lm-eval-style log-likelihoods use)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
import uuid

from k3.serve import chat_route
from k3.serve.structured import request_constraint
from k3.serve.protocol import CompletionRequest, RequestError
from k3.serve.sse import event as _event, first_outputs, interleaved, next_output, started


MAX_PROMPTS = 64   # one request's batched prompts (each still admitted by the engine's queue)


def prompt_list(server, req: CompletionRequest) -> list[list[int]]:
    """The request's prompts as token ids: a string, a token-id list, or a batch of either (OpenAI's
    list form, which lm-eval sends even for one prompt)."""
    prompt = req.prompt
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        prompt = [prompt]
    if not prompt or len(prompt) > MAX_PROMPTS:
        raise RequestError(f"prompt: give 1 to {MAX_PROMPTS} prompts, got {len(prompt)}", "prompt")
    out = []
    for p in prompt:
        if isinstance(p, str):
            server.check_text_size(len(p.encode()), "prompt")
            p = server.tokenizer.encode(p, special=True)
        out.append(list(p))
    return out


def params(server, req: CompletionRequest, ids: list[int]) -> list:
    room = server.check_length(len(ids), req.max_tokens, "prompt")
    max_tokens = req.max_tokens or min(chat_route.DEFAULT_MAX_TOKENS, room)
    structured = request_constraint(req, None)
    out = [chat_route.sampling(req, i, logprobs=req.logprobs, max_tokens=max_tokens, structured=structured)
           for i in range(req.n)]
    if req.echo and req.logprobs is not None:
        out = [dataclasses.replace(p, prompt_logprobs=req.logprobs) for p in out]
    return out


def _admitted(server, req: CompletionRequest) -> tuple[list[list[int]], list[list]]:
    prompts = prompt_list(server, req)
    return prompts, [params(server, req, ids) for ids in prompts]


def _head() -> dict:
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time())}


def _usage(prompt_len: int, outs) -> dict:
    completion = sum(len(o.token_ids) for o in outs)
    return {"prompt_tokens": prompt_len, "completion_tokens": completion, "total_tokens": prompt_len + completion}


async def complete(server, req: CompletionRequest, request=None) -> dict:
    """Every prompt's choices, prompt i's choice j at index i * n + j (as OpenAI numbers them); every
    prompt is checked before any runs."""
    prompts, plans = await asyncio.to_thread(_admitted, server, req)   # validation and tokenizing off the loop
    with server.engine.reserve(sum(map(len, plans))) as ticket:   # every prompt's choices, or none
        results = await server.all_choices([server.run_all(ids, ps, request, ticket) for ids, ps in zip(prompts, plans)],
                                            None)
    choices = []
    for ids, outs in zip(prompts, results):
        prefix = server.tokenizer.decode(ids) if req.echo else ""
        choices += [{"index": len(choices) + j, "text": prefix + (o.text or ""), "finish_reason": o.finish_reason,
                     "logprobs": logprobs(server.tokenizer, o, req.echo) if req.logprobs is not None else None,
                     **({"warning": o.warning} if o.warning else {})}   # e.g. max_tokens cut a structured output
                    for j, o in enumerate(outs)]
    usage = _usage(sum(map(len, prompts)), [o for outs in results for o in outs])
    return _head() | {"model": server.model_name, "choices": choices, "usage": usage}


async def stream(server, req: CompletionRequest, request=None):
    """Admits every choice first (so 400/429 come back as status codes), then returns the SSE body."""
    prompts = await asyncio.to_thread(prompt_list, server, req)
    if len(prompts) > 1:
        raise RequestError("a stream answers one prompt: send batched prompts without stream, or one request each",
                           "prompt")
    ids = prompts[0]
    plan = await asyncio.to_thread(params, server, req, ids)
    with server.engine.reserve(len(plan)) as ticket:     # every choice, or a 429 for the request
        generators = [server.engine.generate(ids, p, ticket=ticket) for p in plan]
        firsts = await first_outputs(server, generators, request, ticket)
    return _sse(server, req, ids, _head() | {"model": server.model_name}, firsts, generators)


async def _sse(server, req, ids, head, firsts, generators):
    outs: list = []
    workers = [functools.partial(_choice, server, req, ids, head, i, first, g)
               for i, (first, g) in enumerate(zip(firsts, generators))]
    async for chunk in interleaved(workers, outs):
        yield chunk
    if req.stream_options and req.stream_options.include_usage:
        yield _event(head | {"choices": [], "usage": _usage(len(ids), outs)})
    yield "data: [DONE]\n\n"


async def _choice(server, req, ids, head, index, first, generator, queue):
    """One choice's text deltas into `queue`, then its finish reason and a non-string marker."""
    def chunk(text: str, reason=None, lp=None) -> str:
        return _event(head | {"choices": [{"index": index, "text": text, "logprobs": lp, "finish_reason": reason}]})

    sent, deadline = 0, time.monotonic() + server.request_timeout
    if req.echo:
        await queue.put(chunk(server.tokenizer.decode(ids)))
    out, _ = await started(first, generator, deadline, server.request_timeout, queue)
    while True:
        text = out.text or ""
        lp = _step_logprobs(server.tokenizer, out) if req.logprobs is not None and out.new_token_ids else None
        if len(text) > sent or lp:
            await queue.put(chunk(text[sent:], lp=lp))
            sent = len(text)
        if out.finished:
            break
        out, cut = await next_output(generator, out, deadline, server.request_timeout, queue)
        if cut:
            break
    if out.finish_reason == "error":
        await queue.put(_event({"error": {"message": out.error, "type": "server_error", "code": 500}}))
    await queue.put(chunk("", out.finish_reason))
    await queue.put(out)
    return out


def _step_logprobs(tokenizer, out) -> dict:
    last = out.logprobs[-len(out.new_token_ids):]
    return {"tokens": [tokenizer.decode([lp.token_id]) for lp in last],
            "token_logprobs": [lp.logprob for lp in last],
            "top_logprobs": [{tokenizer.decode([t]): v for t, v in lp.top.items()} for lp in last]}


def logprobs(tokenizer, out, echo: bool = False) -> dict:
    """OpenAI completions `logprobs`; with echo, the prompt's tokens come first (the first one, which
    nothing predicts, with logprob None) and `text_offset` gives each token's start in the text."""
    ids = ([*out.prompt_token_ids] if echo else []) + [lp.token_id for lp in out.logprobs]
    scored = (list(out.prompt_logprobs) if echo else []) + list(out.logprobs)
    tokens = [tokenizer.decode([t]) for t in ids]
    offsets, pos = [], 0
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {"tokens": tokens, "token_logprobs": [lp.logprob if lp else None for lp in scored],
            "top_logprobs": [{tokenizer.decode([t]): v for t, v in lp.top.items()} if lp else None for lp in scored],
            "text_offset": offsets}
