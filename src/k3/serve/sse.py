"""Server-sent events shared by the chat and completion routes: the choices of one request stream at
once, each from its own task, their chunks interleaved in the order they are produced."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine


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
