"""Drive a client with a workload: warm-up (not counted), then requests released by a Poisson process
(--request-rate) or all at once, with at most --concurrency in flight; multi-turn prompts wait for
their previous turn."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from k3.bench.records import RequestRecord
from k3.bench.workloads import BenchPrompt


def poisson_gaps(n: int, rate: float, seed: int) -> list[float]:
    """Seconds between successive sends: exponential with mean 1/rate (0 for an infinite rate)."""
    if rate == float("inf") or rate <= 0:
        return [0.0] * n
    return list(np.random.default_rng(seed).exponential(1.0 / rate, n))


async def run_workload(client, prompts: list[BenchPrompt], *, concurrency: int | None = None,
                       request_rate: float = float("inf"), warmup: int = 0, seed: int = 0,
                       tick=lambda: None) -> tuple[list[RequestRecord], float]:
    await client.prepare()
    for i in range(warmup):  # sequential, not counted
        p = prompts[i % len(prompts)]
        await client.send(p, RequestRecord(-1 - i, len(p.ids or []), p.max_tokens, warmup=True))
    records = [RequestRecord(i, len(p.ids or []), p.max_tokens, tag=dict(p.tag)) for i, p in enumerate(prompts)]
    done = [asyncio.Event() for _ in prompts]
    limit = asyncio.Semaphore(concurrency or len(prompts) or 1)

    async def one(i: int) -> None:
        p = prompts[i]
        if p.after is not None:
            await done[p.after].wait()
        async with limit:
            await client.send(p, records[i])
        done[i].set()
        tick()

    start = time.perf_counter()
    tasks = []
    for i, gap in enumerate(poisson_gaps(len(prompts), request_rate, seed)):
        if gap:
            await asyncio.sleep(gap)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    ends = [r.end for r in records if r.end is not None]
    duration = (max(ends) if ends else time.perf_counter()) - start
    return records, duration
