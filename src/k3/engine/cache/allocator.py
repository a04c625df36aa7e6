"""Who holds which KDA slot and which MLA blocks: bookkeeping only, owned by the scheduler.

A request reserves one slot and the blocks for its prompt + max_tokens when admitted, so a running
request never runs out of cache. Moving state in and out of the pools is the runner's job.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3.engine.cache.manager import Capacity


@dataclass(frozen=True)
class Placement:
    slot: int
    blocks: tuple[int, ...]


class CacheAllocator:
    def __init__(self, capacity: Capacity, has_mla: bool):
        self.capacity, self.has_mla = capacity, has_mla
        self._free_slots = list(range(capacity.max_seqs - 1, -1, -1))
        self._free_blocks = list(range(capacity.num_blocks - 1, -1, -1))
        self._held: dict[str, Placement] = {}

    @property
    def num_free_slots(self) -> int:
        return len(self._free_slots)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_blocks)

    def blocks_needed(self, total_tokens: int) -> int:
        return -(-total_tokens // self.capacity.block_size) if self.has_mla else 0

    def fits_ever(self, total_tokens: int) -> bool:
        return not self.has_mla or self.blocks_needed(total_tokens) <= self.capacity.num_blocks

    def can_admit(self, total_tokens: int) -> bool:
        return bool(self._free_slots) and self.blocks_needed(total_tokens) <= len(self._free_blocks)

    def admit(self, request_id: str, total_tokens: int) -> Placement:
        need = self.blocks_needed(total_tokens)
        if request_id in self._held or not self.can_admit(total_tokens):
            raise RuntimeError(f"cache: cannot admit {request_id!r} ({need} blocks, {len(self._free_blocks)} free, "
                               f"{len(self._free_slots)} slots free)")
        placement = Placement(self._free_slots.pop(), tuple(self._free_blocks.pop() for _ in range(need)))
        self._held[request_id] = placement
        return placement

    def release(self, request_id: str) -> Placement | None:
        placement = self._held.pop(request_id, None)
        if placement is not None:
            self._free_slots.append(placement.slot)
            self._free_blocks.extend(reversed(placement.blocks))
        return placement

    def placement(self, request_id: str) -> Placement:
        return self._held[request_id]

    def usage(self) -> dict:
        return {"slots_free": self.num_free_slots, "slots_total": self.capacity.max_seqs,
                "blocks_free": self.num_free_blocks, "blocks_total": self.capacity.num_blocks}
