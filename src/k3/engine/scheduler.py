"""Continuous batching with a token budget per step (vLLM v1's contract: {request: num_tokens}).

Running requests go first, least recently scheduled first, so with a small budget they take turns
and none starves. A running request in prefill takes as many prompt tokens as the budget leaves
(chunked prefill), interleaving with others' decode steps. Waiting requests are admitted first come,
first served while there is budget, a free KDA slot and MLA blocks for prompt + max_tokens.

State offload: with an offloader, more sequences are active (up to max_num_seqs) than have state in
the pools. The others are `swapped`: their state sits on disk until their turn. Each step the
sequences waiting longest are swapped in, in place of residents that have run at least `quantum`
steps; the next in line is prefetched so its state is read while this step computes.
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
    def __init__(self, cache: CacheManager, max_num_seqs: int, max_num_batched_tokens: int, offloader=None,
                 quantum: int = 4):
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        self.cache, self.offloader, self.quantum = cache, offloader, quantum
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: list[Request] = []

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def remove(self, request: Request) -> None:
        """Drop a request from the queues and release its cache (finished, aborted or failed)."""
        for queue in (self.running, self.waiting, self.swapped):
            if request in queue:
                queue.remove(request)
                break
        self.cache.release(request.request_id)
        if self.offloader is not None:
            self.offloader.discard(request.request_id)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def schedule(self, step: int) -> list[ScheduledChunk]:
        self._admit(step)
        if self.offloader is not None:
            self._rotate(step)
        budget = self.max_num_batched_tokens
        chunks: list[ScheduledChunk] = []
        # Requests already under way first (least recently served first), newly admitted ones after.
        for req in sorted(self.running, key=lambda r: (r.last_scheduled < 0, r.last_scheduled, r.arrival)):
            if budget == 0:
                break
            n = min(req.num_pending, budget)
            chunks.append(ScheduledChunk(req, n))
            budget -= n
        for c in chunks:
            c.request.last_scheduled = step
        return chunks

    def _admit(self, step: int) -> None:
        while self.waiting and len(self.running) + len(self.swapped) < self.max_num_seqs:
            req = self.waiting[0]
            if not self.swapped and self.cache.can_admit(req.max_total_tokens):
                self.waiting.popleft()
                self._place(req, step)
            elif self.offloader is not None and self.cache.fits_ever(req.max_total_tokens):
                self.waiting.popleft()
                req.status = Status.RUNNING
                self.swapped.append(req)  # not started: swapped in (from zero state) at its turn
            else:
                break

    def _place(self, req: Request, step: int) -> None:
        """Give `req` a slot and blocks, restoring its state if it has one saved or offloaded."""
        self.cache.admit(req.request_id, req.max_total_tokens)
        state = None
        if self.offloader is not None and self.offloader.holds(req.request_id):
            state = self.offloader.take(req.request_id)
        elif req.initial_state is not None:
            state, req.initial_state = req.initial_state, None
            req.num_computed = len(state.token_ids)
        if state is not None:
            self.cache.import_state(req.request_id, state)
        req.status, req.resident_since = Status.RUNNING, step
        self.running.append(req)

    def _rotate(self, step: int) -> None:
        for req in sorted(self.swapped, key=lambda r: (r.last_scheduled, r.arrival)):
            while not self.cache.can_admit(req.max_total_tokens):
                victim = self._victim(step, req)
                if victim is None:
                    break
                self._swap_out(victim)
            if not self.cache.can_admit(req.max_total_tokens):
                break
            self.swapped.remove(req)
            self._place(req, step)
        for req in sorted(self.swapped, key=lambda r: (r.last_scheduled, r.arrival))[:1]:
            self.offloader.prefetch(req.request_id)

    def _victim(self, step: int, waiting: Request) -> Request | None:
        """The resident served most recently, if it has had its quantum and was served after `waiting`."""
        ready = [r for r in self.running if step - r.resident_since >= self.quantum
                 and (r.last_scheduled, r.arrival) > (waiting.last_scheduled, waiting.arrival)]
        return max(ready, key=lambda r: (r.last_scheduled, r.arrival), default=None)

    def _swap_out(self, req: Request) -> None:
        state = self.cache.export(req.request_id, req.num_computed)
        state.token_ids = req.all_ids[:req.num_computed]
        self.cache.release(req.request_id)
        self.running.remove(req)
        self.offloader.put(req.request_id, state)
        self.swapped.append(req)
