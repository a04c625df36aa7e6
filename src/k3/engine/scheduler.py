"""Continuous batching with a token budget per step (vLLM v1's contract: {request: num_tokens}).

The scheduler decides and the runner carries out: `schedule()` returns a `SchedulerOutput` (which
requests run how many tokens, which sequences take a slot and blocks and where their state comes
from, which are swapped out: k3/engine/scheduled.py), and `update_from_output()` advances `num_computed`
once the step has run and lets the requests that finished go, returning what the runner copies before
anything is placed again (snapshot orders, the finished requests' placements). It is the only owner of
allocation (`CacheAllocator`), of `num_computed` and of finishing; it never touches tensors.

Running requests go first, least recently scheduled first, so with a small budget they take turns
and none starves. A running request in prefill takes as many prompt tokens as the budget leaves
(chunked prefill), interleaving with others' decode steps. A decoding request with drafts
(`Request.draft_ids`, speculative decoding) runs them as a verify window: its pending token and as many
drafts as the budget leaves; `update()` then keeps the positions the verifier accepted. Waiting requests are admitted first come,
first served while there is budget, a free KDA slot and MLA blocks for prompt + max_tokens.

Prefix caching (a `PrefixCache`): a new request is placed at the longest cached prefix of its prompt
(shared MLA blocks + a KDA snapshot, or a spilled state), and its chunks are cut at its snapshot
points so the state after the step is exactly there. `update()` registers the blocks a step filled
and orders the snapshots the runner takes. A waiting request whose prefix a running request is
about to snapshot stays waiting (the requests behind it are still admitted) until it can resume there.

State offload: with offloading on, more sequences are active (up to max_num_seqs) than have state in
the pools. The others are `swapped`: their state sits on disk until their turn. Each step the
sequences waiting longest are swapped in, in place of residents that have run at least `quantum`
steps; the next in line is prefetched so its state is read while this step computes.
"""

from __future__ import annotations

from collections import deque

from k3.engine.memory.allocator import CacheAllocator
from k3.engine.prefix.cache import NO_MATCH, PrefixCache, PrefixMatch
from k3.engine.request import Request, Status
from k3.engine.scheduled import (NEW, OFFLOADED, PREFIX, RESUME, Finished, Placed, ScheduledChunk, SchedulerOutput,
                                 SnapshotOrder, SwappedOut)

class Scheduler:
    def __init__(self, allocator: CacheAllocator, max_num_seqs: int, max_num_batched_tokens: int,
                 offload: bool = False, quantum: int = 4, prefix: PrefixCache | None = None):
        if quantum < 1:
            raise ValueError("quantum must be >= 1 (a sequence runs at least one step before it is swapped out)")
        self.allocator, self.offload, self.quantum, self.prefix = allocator, offload, quantum, prefix
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

    def finish(self, request: Request, keep: bool = True) -> Finished:
        """Let go of a request (finished, aborted or failed): drop it from the queues and release its cache,
        returning where its state was and, when `keep` (not a failure), the snapshot its conversation's next
        turn resumes from, for the runner to copy before anything is placed."""
        order = self.snapshot_order(request) if keep else None
        placement = self.allocator.held(request.request_id)
        self.remove(request)
        return Finished(request, placement, order)

    def update_from_output(self, out: SchedulerOutput, kept: dict[str, int],
                           ending: list[tuple[Request, bool]]) -> tuple[list[SnapshotOrder], list[Finished]]:
        """The step ran: advance its requests (`update`), then let go of those `ending` ((request, keep) as
        `finish` takes them). -> (the snapshots to take, the finished requests): what the runner copies."""
        self.update(out, kept)
        return out.snapshots, [self.finish(req, keep) for req, keep in ending]

    def remove(self, request: Request) -> None:
        """Drop a request from the queues and release its cache (through `finish`)."""
        request.status = Status.FINISHED
        for queue in (self.running, self.waiting, self.swapped):
            if request in queue:
                queue.remove(request)
                break
        self.allocator.release(request.request_id)
        self._offloaded.discard(request.request_id)
        if self.prefix is not None:
            self.prefix.passed(request.request_id, None)

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
            draft = tuple(req.draft_ids[:budget - 1]) if req.num_pending == 1 else ()
            n = _cut(req, min(req.num_pending, budget)) + len(draft)
            self._out.chunks.append(ScheduledChunk(req, n, self.allocator.placement(req.request_id), draft))
            budget -= n
        for c in self._out.chunks:
            c.request.last_scheduled = step
        self._out.evicted, self.allocator.evicted = self.allocator.evicted, []
        return self._out

    def update(self, out: SchedulerOutput, kept: dict[str, int] | None = None) -> None:
        """The step ran: its tokens are now in the cache (and full blocks registered, snapshots ordered).
        kept: request id -> positions of its verify window kept (its pending token + accepted drafts)."""
        for c in out.chunks:
            c.request.num_computed += kept[c.request.request_id] if c.window else c.num_tokens
            if self.prefix is not None:
                self._register(c.request, out)

    def _register(self, req: Request, out: SchedulerOutput) -> None:
        self.allocator.register(req.request_id, req.key_ids, req.num_computed)
        self.prefix.passed(req.request_id, req.num_computed)
        if req.num_computed in req.snapshot_at or req.num_computed == len(req.prompt_ids):
            order = self.snapshot_order(req)
            if order is not None:
                out.snapshots.append(order)

    def snapshot_order(self, req: Request) -> SnapshotOrder | None:
        """A snapshot of a placed request's state as it is now (after a step, or as it finishes), or None
        when prefix caching is off for it or its prefix's blocks are no longer all cached."""
        if self.prefix is None or not req.prefix_cached or not req.num_computed or not self.prefix.store.enabled:
            return None
        chain = self.allocator.chain_end(req.request_id)
        bs = self.allocator.capacity.block_size
        if chain is None or chain[1] != req.num_computed // bs:
            return None
        holder, count = chain
        placement = self.allocator.placement(req.request_id)
        tail = tuple(req.key_ids[count * bs:req.num_computed])
        return SnapshotOrder(holder, tail, placement.slot, placement.blocks[count] if tail else None)

    def _admit(self, step: int) -> None:
        held_back: list[Request] = []
        while self.waiting and len(self.running) + len(self.swapped) < self.max_num_seqs:
            req = self.waiting[0]
            match = self._match(req)
            if match is not NO_MATCH and self.prefix.should_wait(req, match, self.running):
                held_back.append(self.waiting.popleft())   # a running request will soon snapshot its prefix
                continue
            if not self.swapped and self.allocator.can_admit(req.max_total_tokens, _blocks(match)):
                self.waiting.popleft()
                self._place(req, step, self._deeper_on_disk(req, match))
            elif self.offload and self.allocator.fits_ever(req.max_total_tokens):
                self.waiting.popleft()
                req.status = Status.RUNNING
                self.swapped.append(req)  # not started: swapped in (from zero state) at its turn
            else:
                break
        self.waiting.extendleft(reversed(held_back))

    def _match(self, req: Request) -> PrefixMatch:
        """A new request's cached prefix in memory (not one resumed, swapped back, or scoring its prompt)."""
        if (self.prefix is None or req.initial_state is not None or req.prompt_logprobs is not None
                or req.request_id in self._offloaded or req.num_computed):
            return NO_MATCH
        return self.prefix.match(req.prompt_key_ids)

    def _deeper_on_disk(self, req: Request, match: PrefixMatch) -> PrefixMatch:
        """Once admission is certain: a spilled state deeper than the memory match, if it fits."""
        if match is NO_MATCH or self.prefix.store.spill is None:
            return match
        disk = self.prefix.on_disk(req.prompt_key_ids, match)
        return disk if disk is not None and self.allocator.can_admit(req.max_total_tokens) else match

    def _place(self, req: Request, step: int, match: PrefixMatch = NO_MATCH) -> None:
        placement = self.allocator.admit(req.request_id, req.max_total_tokens, match.shared)
        snapshot = state = None
        if req.request_id in self._offloaded:
            self._offloaded.discard(req.request_id)
            source = OFFLOADED
        else:
            state, req.initial_state = match.state or req.initial_state, None   # handed to the runner in the scheduler's output
            if state is not None:
                source = RESUME
                req.num_computed = len(state.token_ids)
            elif match.snapshot is not None:
                source, snapshot = PREFIX, match.snapshot
                req.num_computed = match.num_tokens
            else:
                source = NEW
            if self.prefix is not None:
                req.prefix_cached = True
                req.snapshot_at = self.prefix.admitted(req.request_id, req.prompt_key_ids, match,
                                                       looked_up=match is not NO_MATCH)
        self._out.placed.append(Placed(req, placement, source, snapshot, state))
        req.status, req.resident_since = Status.RUNNING, step
        self.running.append(req)

    def _rotate(self, step: int) -> None:
        for req in sorted(self.swapped, key=lambda r: (r.last_scheduled, r.arrival)):
            match = self._match(req)
            while not self.allocator.can_admit(req.max_total_tokens, _blocks(match)):
                victim = self._victim(step, req)
                if victim is None:
                    break
                self._swap_out(victim)
                match = self._match(req)  # the victim's blocks may now be cached ones
            if not self.allocator.can_admit(req.max_total_tokens, _blocks(match)):
                break
            self.swapped.remove(req)
            self._place(req, step, self._deeper_on_disk(req, match))
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


def _blocks(match: PrefixMatch) -> tuple[int, ...]:
    return tuple(e.block for e in match.shared)


def _cut(req: Request, n: int) -> int:
    """End a chunk at the request's next snapshot point, if it falls inside the chunk."""
    start = req.num_computed
    for q in req.snapshot_at:
        if start < q < start + n:
            return q - start
    return n
