"""Continuous batching with a token budget per step (vLLM v1's contract: {request: num_tokens}).

Running requests go first, least recently scheduled first, so with a small budget they take turns
and none starves. A running request in prefill takes as many prompt tokens as the budget leaves
(chunked prefill), interleaving with others' decode steps. Waiting requests are admitted first come,
first served while there is budget, a free KDA slot and MLA blocks for prompt + max_tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from k3.engine.cache.manager import CacheManager
from k3.engine.request import Request, Status


@dataclass(frozen=True)
class ScheduledChunk:
    request: Request
    num_tokens: int


class Scheduler:
    def __init__(self, cache: CacheManager, max_num_seqs: int, max_num_batched_tokens: int):
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        self.cache = cache
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def remove(self, request: Request) -> None:
        """Drop a request from the queues and release its cache (finished, aborted or failed)."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.cache.release(request.request_id)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, step: int) -> list[ScheduledChunk]:
        budget = self.max_num_batched_tokens
        chunks: list[ScheduledChunk] = []
        for req in sorted(self.running, key=lambda r: (r.last_scheduled, r.arrival)):
            if budget == 0:
                break
            n = min(req.num_pending, budget)
            chunks.append(ScheduledChunk(req, n))
            budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if not self.cache.can_admit(req.max_total_tokens):
                break
            self.waiting.popleft()
            self.cache.admit(req.request_id, req.max_total_tokens)
            req.status = Status.RUNNING
            self.running.append(req)
            n = min(req.num_pending, budget)
            chunks.append(ScheduledChunk(req, n))
            budget -= n
        for c in chunks:
            c.request.last_scheduled = step
        return chunks
