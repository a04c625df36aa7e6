"""Prefix caching for K3's hybrid state: where a new request may resume, and where snapshots are taken.

A request resumes at the longest prefix p of its prompt that has both its MLA rows (full blocks
registered in the `BlockIndex`, plus a snapshot's copied tail) and a KDA snapshot at exactly p
(`SnapshotStore`), or failing that a spilled state on disk; it prefills only the rest. At least one
prompt token is always computed (its logits give the first output token), so p < len(prompt).

Snapshots are taken where a step ends anyway, so they cost one copy of a KDA slot and no extra
forward pass:
- at the end of the prompt (a client that resends the prompt with more after it: the next turn of a
  chat whose template drops the last answer's reasoning, an identical prompt sampled again);
- when a request finishes or is aborted, at its last computed token (the next turn of a
  conversation that resends the answer as generated);
and at two kinds of block boundary a prefill chunk is cut for (one more, short, step):
- the last block boundary before the end of a long prompt (LONG_PROMPT_BLOCKS blocks or more): the
  same prompt sent again resumes there, recomputing fewer than block_size tokens;
- a branch point: the end of the cached full blocks a new request shares with earlier ones but has
  no snapshot for (a system prompt that several requests begin with), learnt when the second such
  request arrives; later ones resume there;
- an in-flight branch point: when a request arrives sharing full prompt blocks with one still in
  prefill, beyond where that one has computed, the one in prefill is asked to snapshot where the
  shared blocks end (requests sent together with one system prompt compute it once).
A request that would resume at a snapshot another request is on its way to take waits for it
(`should_wait`) rather than compute the same prefix alongside.
"""

from __future__ import annotations

from bisect import insort

from dataclasses import dataclass

from k3.engine.prefix.index import BlockIndex, CachedBlock
from k3.engine.memory.sequence_state import SequenceState
from k3.engine.prefix.snapshots import Snapshot, SnapshotStore


@dataclass(frozen=True)
class PrefixMatch:
    num_tokens: int = 0                          # prompt tokens whose state is reused
    shared: tuple[CachedBlock, ...] = ()         # their full MLA blocks, shared read-only (a memory hit)
    snapshot: Snapshot | None = None             # KDA state (and tail rows) at num_tokens (a memory hit)
    state: SequenceState | None = None           # the whole state at num_tokens, read from disk (a disk hit)
    cached_blocks: int = 0                       # prompt blocks found registered (with or without a snapshot)
    beyond: tuple[CachedBlock, ...] = ()         # registered prompt blocks past num_tokens (no snapshot there yet)


NO_MATCH = PrefixMatch()
LONG_PROMPT_BLOCKS = 32  # a cut costs about one decode step: worth it once the prompt is 512 tokens (at 16 a block)


class PrefixCache:
    def __init__(self, index: BlockIndex, store: SnapshotStore):
        self.index, self.store, self.block_size = index, store, index.block_size
        self.counters = {"prefix_cache_queries": 0, "prefix_cache_hits": 0}
        self._branches: dict[CachedBlock, tuple[str, int]] = {}   # branch block -> (request snapshotting, where)

    def match(self, prompt: list[int]) -> PrefixMatch:
        """Where a request with this prompt may resume in memory (counters untouched: it may wait)."""
        bs, limit = self.block_size, len(prompt) - 1
        chain = self.index.walk(prompt, limit // bs)
        for k in range(len(chain), -1, -1):
            holder = chain[k - 1] if k else None
            snaps = [s for tail, s in self.store.holder_map(holder).items()
                     if k * bs + len(tail) <= limit and tuple(prompt[k * bs:k * bs + len(tail)]) == tail]
            if snaps:
                best = max(snaps, key=lambda s: len(s.tail))
                return PrefixMatch(best.num_tokens, tuple(chain[:k]), best, cached_blocks=len(chain),
                                   beyond=tuple(chain[k:]))
        return PrefixMatch(cached_blocks=len(chain), beyond=tuple(chain))

    def should_wait(self, req, match: PrefixMatch, running) -> bool:
        """True if `req` should wait a step: a running request is computing towards a snapshot that would
        let `req` resume further than `match` does (a promised branch point, or a prefix `req` shares
        with a request in prefill, which is then asked to snapshot where their shared blocks end)."""
        if any(e in self._branches for e in match.beyond):
            return True
        for r in running:
            if not r.prefix_cached or r.num_computed >= len(r.prompt_ids):
                continue
            shared = _shared_blocks(req.prompt_key_ids, r.prompt_key_ids, self.block_size) * self.block_size
            if shared > max(match.num_tokens, r.num_computed) and self.store.enabled:
                if shared not in r.snapshot_at:
                    insort(r.snapshot_at, shared)
                return True
        return False

    def on_disk(self, prompt: list[int], match: PrefixMatch) -> PrefixMatch | None:
        """A spilled state for a longer prefix than `match` (read from disk), or None."""
        state = self.store.spill.find(prompt, above=match.num_tokens)
        if state is None:
            return None
        return PrefixMatch(len(state.token_ids), state=state, cached_blocks=match.cached_blocks)

    def admitted(self, request_id: str, prompt: list[int], match: PrefixMatch, looked_up: bool = True) -> list[int]:
        """Count the lookup (if one was made); returns the positions to cut chunks at and snapshot."""
        if looked_up:
            self.counters["prefix_cache_queries"] += len(prompt)
            self.counters["prefix_cache_hits"] += match.num_tokens
        if match.snapshot is not None:
            self.store.touch(match.snapshot)
        if not self.store.enabled:
            return []
        bs = self.block_size
        points = {match.cached_blocks * bs}
        if match.beyond:
            self._branches[match.beyond[-1]] = (request_id, match.cached_blocks * bs)
        if len(prompt) >= LONG_PROMPT_BLOCKS * bs:
            points.add((len(prompt) - 1) // bs * bs)
        return sorted(p for p in points if match.num_tokens < p < len(prompt))

    def passed(self, request_id: str, num_computed: int | None) -> None:
        """The request has computed num_computed tokens (None: it ended): the branch snapshots it has
        taken (or will never take) need no one to wait any more."""
        for entry, (rid, pos) in list(self._branches.items()):
            if rid == request_id and (num_computed is None or pos <= num_computed):
                del self._branches[entry]

    def stats(self) -> dict:
        q, h = self.counters["prefix_cache_queries"], self.counters["prefix_cache_hits"]
        return dict(self.counters, prefix_cache_hit_rate=h / q if q else 0.0, **self.store.stats())


def _shared_blocks(prompt: list[int], other: list[int], block_size: int) -> int:
    """Leading full blocks `prompt` shares with `other`, leaving at least one token of `prompt` after them."""
    lo, hi = 0, min((len(prompt) - 1) // block_size, len(other) // block_size)
    while lo < hi:   # binary search on slice equality: C-speed comparisons, log(blocks) of them
        mid = (lo + hi + 1) // 2
        if prompt[:mid * block_size] == other[:mid * block_size]:
            lo = mid
        else:
            hi = mid - 1
    return lo
