"""Server-sent events shared by the chat and completion routes: the choices of one request stream at
once, each from its own task, their chunks interleaved in the order they are produced."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine

from k3.engine.request import RequestOutput

NOT_STARTED = RequestOutput("", [], [], [], "", False, None)   # a later turn's choice before its first output


async def interleaved(workers: list[Callable[[asyncio.Queue], Coroutine]], results: list) -> AsyncIterator[str]:
    """Runs each worker(queue) as a task and yields the strings they put, until every worker has put
    one non-string marker (its end). Then `results` gets the workers' return values, in order.
    Leaving early (the client went away) cancels the workers."""
    queue: asyncio.Queue = asyncio.Queue()
    tasks = [asyncio.create_task(work(queue)) for work in workers]
    remaining = len(tasks)
    try:
        while remaining:
            item = await queue.get()
            if isinstance(item, str):
                yield item
            else:
                remaining -= 1
        results.extend([await t for t in tasks])
    finally:
        for t in tasks:
            t.cancel()


def event(obj: dict) -> str:
    return "data: " + json.dumps(obj) + "\n\n"


async def next_output(generator, out, deadline: float, timeout_s: float, queue: asyncio.Queue):
    """-> (the generator's next output, False); past `deadline`: the generator is aborted, a timeout
    error event queued, and (`out` marked finished with reason "length", True) returned.
    asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that arrives as the output
    does, and the worker then streams on after a forced shut-down cancelled it (the process never exits)."""
    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            return await anext(generator), False
    except TimeoutError:
        await generator.aclose()
        await queue.put(event({"error": {"message": f"request took longer than {timeout_s:g} s", "type": "timeout",
                                         "code": 504}}))
        return dataclasses.replace(out, finished=True, finish_reason="length"), True


async def first_outputs(server, generators: list, request, ticket) -> list:
    """Each choice's first output (admitted, and its first token out), so that a 400 or 429 is still a status
    code before the stream's 200. Meanwhile the request may wait its turn in the engine's queue for long:
    a client that leaves then aborts every choice (ClientGone), never prefilled and sampled for nobody.
    Choices of a later turn (more choices than the queue has places) start as earlier ones finish: None
    for them here, and `started` waits for their first output."""
    tasks = [asyncio.ensure_future(anext(g)) for g in generators[:ticket.places]]
    try:
        firsts = await server.all_choices(tasks, request)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)   # a generator cannot be closed while it runs
        for g in generators:
            await g.aclose()                               # abort the choices already admitted
        raise
    return list(firsts) + [None] * (len(generators) - len(tasks))


async def started(first, generator, deadline: float, timeout_s: float, queue: asyncio.Queue):
    """-> (a choice's first output, cut short): `first`, or for a later turn the generator's first (next_output)."""
    if first is not None:
        return first, False
    return await next_output(generator, NOT_STARTED, deadline, timeout_s, queue)
