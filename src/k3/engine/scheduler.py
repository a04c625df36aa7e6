"""Continuous batching with a token budget per step (vLLM v1's contract: {request: num_tokens}).

The scheduler decides and the runner carries out: `schedule()` returns a `SchedulerOutput` (which
requests run how many tokens, which sequences take a slot and blocks and where their state comes
from, which are swapped out), and `update()` advances `num_computed` once the step has run. It is
the only owner of allocation (`CacheAllocator`) and of `num_computed`; it never touches tensors.

Running requests go first, least recently scheduled first, so with a small budget they take turns
and none starves. A running request in prefill takes as many prompt tokens as the budget leaves
(chunked prefill), interleaving with others' decode steps. Waiting requests are admitted first come,
first served while there is budget, a free KDA slot and MLA blocks for prompt + max_tokens.

State offload: with offloading on, more sequences are active (up to max_num_seqs) than have state in
the pools. The others are `swapped`: their state sits on disk until their turn. Each step the
sequences waiting longest are swapped in, in place of residents that have run at least `quantum`
steps; the next in line is prefetched so its state is read while this step computes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from k3.engine.cache.allocator import CacheAllocator, Placement
from k3.engine.request import Request, Status

NEW, RESUME, OFFLOADED = "new", "resume", "offloaded"   # where a placed sequence's state comes from


@dataclass(frozen=True)
class ScheduledChunk:
    request: Request
    num_tokens: int
    placement: Placement | None = None


@dataclass(frozen=True)
class Placed:
    request: Request
    placement: Placement
    source: str            # NEW (zero state), RESUME (request.initial_state), OFFLOADED (the offloader holds it)


@dataclass(frozen=True)
class SwappedOut:
    request: Request
    placement: Placement   # what it held, already released: export before anything is placed
    num_tokens: int


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    swapped_out: list[SwappedOut] = field(default_factory=list)
    placed: list[Placed] = field(default_factory=list)
    prefetch: list[str] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)


class Scheduler:
    def __init__(self, allocator: CacheAllocator, max_num_seqs: int, max_num_batched_tokens: int,
                 offload: bool = False, quantum: int = 4):
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        if quantum < 1:
            raise ValueError("quantum must be >= 1 (a sequence runs at least one step before it is swapped out)")
        self.allocator, self.offload, self.quantum = allocator, offload, quantum
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: list[Request] = []
        self._offloaded: set[str] = set()
        self._step = 0
        self._out = SchedulerOutput()

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def remove(self, request: Request) -> None:
        """Drop a request from the queues and release its cache (finished, aborted or failed)."""
        for queue in (self.running, self.waiting, self.swapped):
            if request in queue:
                queue.remove(request)
                break
        self.allocator.release(request.request_id)
        self._offloaded.discard(request.request_id)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def counts(self) -> dict:
        return {"running": len(self.running), "waiting": len(self.waiting), "swapped": len(self.swapped)}

    def schedule(self) -> SchedulerOutput:
        step, self._out = self._step, SchedulerOutput()
        self._step += 1
        self._admit(step)
        if self.offload:
            self._rotate(step)
        budget = self.max_num_batched_tokens
        # Requests already under way first (least recently served first), newly admitted ones after.
        for req in sorted(self.running, key=lambda r: (r.last_scheduled < 0, r.last_scheduled, r.arrival)):
            if budget == 0:
                break
            n = min(req.num_pending, budget)
            self._out.chunks.append(ScheduledChunk(req, n, self.allocator.placement(req.request_id)))
            budget -= n
        for c in self._out.chunks:
            c.request.last_scheduled = step
        return self._out

    def update(self, out: SchedulerOutput) -> None:
        """The step ran: its tokens are now in the cache."""
        for c in out.chunks:
            c.request.num_computed += c.num_tokens

    def _admit(self, step: int) -> None:
        while self.waiting and len(self.running) + len(self.swapped) < self.max_num_seqs:
            req = self.waiting[0]
            if not self.swapped and self.allocator.can_admit(req.max_total_tokens):
                self.waiting.popleft()
                self._place(req, step)
            elif self.offload and self.allocator.fits_ever(req.max_total_tokens):
                self.waiting.popleft()
                req.status = Status.RUNNING
                self.swapped.append(req)  # not started: swapped in (from zero state) at its turn
            else:
                break

    def _place(self, req: Request, step: int) -> None:
        placement = self.allocator.admit(req.request_id, req.max_total_tokens)
        if req.request_id in self._offloaded:
            self._offloaded.discard(req.request_id)
            source = OFFLOADED
        elif req.initial_state is not None:
            source = RESUME
            req.num_computed = len(req.initial_state.token_ids)
        else:
            source = NEW
        self._out.placed.append(Placed(req, placement, source))
        req.status, req.resident_since = Status.RUNNING, step
        self.running.append(req)

    def _rotate(self, step: int) -> None:
        for req in sorted(self.swapped, key=lambda r: (r.last_scheduled, r.arrival)):
            while not self.allocator.can_admit(req.max_total_tokens):
                victim = self._victim(step, req)
                if victim is None:
                    break
                self._swap_out(victim)
            if not self.allocator.can_admit(req.max_total_tokens):
                break
            self.swapped.remove(req)
            self._place(req, step)
        nxt = sorted(self.swapped, key=lambda r: (r.last_scheduled, r.arrival))[:1]
        self._out.prefetch.extend(r.request_id for r in nxt if r.request_id in self._offloaded)

    def _victim(self, step: int, waiting: Request) -> Request | None:
        """The resident served most recently, if it has had its quantum and was served after `waiting`."""
        ready = [r for r in self.running if step - r.resident_since >= self.quantum
                 and (r.last_scheduled, r.arrival) > (waiting.last_scheduled, waiting.arrival)]
        return max(ready, key=lambda r: (r.last_scheduled, r.arrival), default=None)

    def _swap_out(self, req: Request) -> None:
        placement = self.allocator.release(req.request_id)
        self._out.swapped_out.append(SwappedOut(req, placement, req.num_computed))
        self._offloaded.add(req.request_id)
        self.running.remove(req)
        self.swapped.append(req)
