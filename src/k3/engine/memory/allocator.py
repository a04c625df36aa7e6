"""Who holds which KDA slot and which MLA blocks: bookkeeping only, owned by the scheduler.

A request reserves one slot and the blocks for its prompt + max_tokens when admitted, so a running
request never runs out of cache. Moving state in and out of the pools is the runner's job.

With prefix caching (a `BlockIndex`), blocks are reference-counted: a request may begin with blocks
another request computed (`shared`, full and read-only: nothing writes a row before its own
position, and shared blocks end before it), and a released block that holds a registered prefix
stays cached, evictable, rather than free. Evictable blocks count as free; they are taken least
recently used first (a request's tail blocks before its head, so chains shrink from the end).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from k3.engine.memory.manager import Capacity
from k3.engine.prefix.index import BlockIndex, CachedBlock


@dataclass(frozen=True)
class Placement:
    slot: int
    blocks: tuple[int, ...]


class CacheAllocator:
    def __init__(self, capacity: Capacity, has_mla: bool, index: BlockIndex | None = None):
        self.capacity, self.has_mla, self.index = capacity, has_mla, index
        self._free_slots = list(range(capacity.max_seqs - 1, -1, -1))
        self._free_blocks = list(range(capacity.num_blocks - 1, -1, -1))
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, held by no one; oldest first
        self._refs: dict[int, int] = {}
        self._held: dict[str, Placement] = {}
        self._chains: dict[str, tuple[CachedBlock | None, int]] = {}  # request -> (last entry, blocks registered)
        self.evicted: list[CachedBlock] = []  # unregistered since last taken (their snapshots must go)

    @property
    def num_free_slots(self) -> int:
        return len(self._free_slots)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_blocks) + len(self._evictable)

    def blocks_needed(self, total_tokens: int) -> int:
        return -(-total_tokens // self.capacity.block_size) if self.has_mla else 0

    def fits_ever(self, total_tokens: int) -> bool:
        return not self.has_mla or self.blocks_needed(total_tokens) <= self.capacity.num_blocks

    def can_admit(self, total_tokens: int, shared: tuple[int, ...] = ()) -> bool:
        available = self.num_free_blocks - sum(b in self._evictable for b in shared)
        return bool(self._free_slots) and self.blocks_needed(total_tokens) - len(shared) <= available

    def admit(self, request_id: str, total_tokens: int, shared: tuple[CachedBlock, ...] = ()) -> Placement:
        """A slot and blocks for total_tokens; the first len(shared) blocks are those registered entries'."""
        shared_blocks = tuple(e.block for e in shared)
        need = self.blocks_needed(total_tokens) - len(shared_blocks)
        if request_id in self._held or not self.can_admit(total_tokens, shared_blocks):
            raise RuntimeError(f"cache: cannot admit {request_id!r} ({need} blocks, {self.num_free_blocks} free, "
                               f"{len(self._free_slots)} slots free)")
        for b in shared_blocks:
            self._evictable.pop(b, None)
            self._refs[b] = self._refs.get(b, 0) + 1
        fresh = tuple(self._take_block() for _ in range(need))
        for b in fresh:
            self._refs[b] = 1
        placement = Placement(self._free_slots.pop(), shared_blocks + fresh)
        self._held[request_id] = placement
        self._chains[request_id] = (shared[-1] if shared else None, len(shared))
        return placement

    def _take_block(self) -> int:
        if self._free_blocks:
            return self._free_blocks.pop()
        block, _ = self._evictable.popitem(last=False)
        for e in self.index.unregister(self.index.entry(block)):
            self.evicted.append(e)
            if e.block != block and e.block in self._evictable:  # a descendant no one holds: plain free now
                del self._evictable[e.block]
                self._free_blocks.append(e.block)
        return block

    def register(self, request_id: str, token_ids: list[int], num_tokens: int) -> None:
        """Register the request's blocks that `num_tokens` computed tokens have filled (an equal block
        registered earlier is used instead, and the request's own copy stays private)."""
        if self.index is None or not self.has_mla or request_id not in self._held:
            return
        last, count = self._chains[request_id]
        bs, blocks = self.capacity.block_size, self._held[request_id].blocks
        while (count + 1) * bs <= num_tokens and (last is None or last.registered):
            last = self.index.register(last, tuple(token_ids[count * bs:(count + 1) * bs]), blocks[count])
            count += 1
        self._chains[request_id] = (last, count)

    def chain_end(self, request_id: str) -> tuple[CachedBlock | None, int] | None:
        """(last registered entry or None for the root, blocks registered) of a held request whose
        chain is intact; None if it is not held or part of its prefix was evicted."""
        chain = self._chains.get(request_id)
        if chain is None or (chain[0] is not None and not chain[0].registered):
            return None
        return chain

    def release(self, request_id: str) -> Placement | None:
        placement = self._held.pop(request_id, None)
        self._chains.pop(request_id, None)
        if placement is None:
            return None
        self._free_slots.append(placement.slot)
        for b in reversed(placement.blocks):
            self._refs[b] -= 1
            if self._refs[b]:
                continue
            del self._refs[b]
            entry = self.index.entry(b) if self.index is not None else None
            if entry is not None:
                self._evictable[b] = None
            else:
                self._free_blocks.append(b)
        return placement

    def placement(self, request_id: str) -> Placement:
        return self._held[request_id]

    def held(self, request_id: str) -> Placement | None:
        """Its placement, or None for a request that holds none (waiting, swapped out)."""
        return self._held.get(request_id)

    def usage(self) -> dict:
        return {"slots_free": self.num_free_slots, "slots_total": self.capacity.max_seqs,
                "blocks_free": self.num_free_blocks, "blocks_total": self.capacity.num_blocks,
                "blocks_cached": len(self.index) if self.index is not None else 0}
