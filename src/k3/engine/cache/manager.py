"""Sizes the engine's state from a memory budget and hands each step's layer views to the model.

Capacity: one KDA slot per concurrent sequence (`max_num_seqs`), the rest of the budget as MLA
blocks. A request reserves blocks for its prompt plus `max_tokens` when admitted, so a running
request never runs out of cache and nothing needs preempting.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from k3.engine.cache.blocks import BlockPool
from k3.engine.cache.slots import SlotPool
from k3.engine.cache.snapshot import SequenceState, export_state, import_state
from k3.layers.state import StateSpec


@dataclass(frozen=True)
class Capacity:
    max_seqs: int
    num_blocks: int
    block_size: int
    slot_bytes: int
    token_bytes: int

    @property
    def max_cached_tokens(self) -> int | None:
        """Tokens the MLA pool holds in all; None when the model has no MLA layer (no per-token state)."""
        return self.num_blocks * self.block_size if self.token_bytes else None

    @property
    def total_bytes(self) -> int:
        return self.max_seqs * self.slot_bytes + self.num_blocks * self.block_size * self.token_bytes

    def describe(self) -> str:
        tokens = "unbounded (no MLA layers)" if self.max_cached_tokens is None else f"{self.max_cached_tokens:,}"
        return (f"cache capacity: {self.max_seqs} concurrent sequences ({self.slot_bytes:,} B of KDA state each), "
                f"{tokens} cached tokens ({self.token_bytes:,} B/token, blocks of {self.block_size}); "
                f"{self.total_bytes / 2 ** 20:,.1f} MiB")


def plan_capacity(spec: StateSpec, budget_bytes: int, max_num_seqs: int, block_size: int,
                  dtype: torch.dtype) -> Capacity:
    itemsize = torch.empty((), dtype=dtype).element_size()
    slot, token = spec.slot_bytes(itemsize), spec.token_bytes(itemsize)
    rest = budget_bytes - max_num_seqs * slot
    if rest < 0 or (token and rest < block_size * token):
        need = max_num_seqs * slot + block_size * token
        raise ValueError(f"cache memory budget {budget_bytes:,} B is too small for max_num_seqs={max_num_seqs}: "
                         f"need at least {need:,} B; raise the budget or lower max_num_seqs")
    num_blocks = rest // (block_size * token) if token else 0
    return Capacity(max_num_seqs, num_blocks, block_size, slot, token)


def fit_capacity(spec: StateSpec, budget_bytes: int, max_num_seqs: int, max_resident_seqs: int | None,
                 block_size: int, dtype: torch.dtype) -> Capacity:
    """`max_resident_seqs` slots if given; otherwise as many of `max_num_seqs` as the budget holds
    (at least one; fewer than max_num_seqs means the engine offloads waiting sequences' state)."""
    if max_resident_seqs is not None:
        if not 1 <= max_resident_seqs <= max_num_seqs:
            raise ValueError(f"max_resident_seqs must be in 1..max_num_seqs ({max_num_seqs})")
        return plan_capacity(spec, budget_bytes, max_resident_seqs, block_size, dtype)
    for seqs in range(max_num_seqs, 0, -1):
        try:
            return plan_capacity(spec, budget_bytes, seqs, block_size, dtype)
        except ValueError:
            if seqs == 1:
                raise
    raise AssertionError("unreachable")


class CacheManager:
    def __init__(self, spec: StateSpec, capacity: Capacity, dtype: torch.dtype, device: torch.device):
        self.spec, self.capacity = spec, capacity
        self.slots = SlotPool(spec, capacity.max_seqs, dtype, device)
        self.blocks = BlockPool(spec, capacity.num_blocks, capacity.block_size, dtype, device)
        self._slot: dict[str, int] = {}
        self._table: dict[str, list[int]] = {}

    def blocks_needed(self, total_tokens: int) -> int:
        return self.blocks.blocks_for(total_tokens) if self.spec.mla_layers else 0

    def fits_ever(self, total_tokens: int) -> bool:
        return self.blocks_needed(total_tokens) <= self.capacity.num_blocks or not self.spec.mla_layers

    def can_admit(self, total_tokens: int) -> bool:
        return self.slots.num_free > 0 and self.blocks_needed(total_tokens) <= self.blocks.num_free

    def admit(self, request_id: str, total_tokens: int) -> None:
        self._slot[request_id] = self.slots.allocate()
        self._table[request_id] = self.blocks.allocate(self.blocks_needed(total_tokens))

    def release(self, request_id: str) -> None:
        if request_id in self._slot:
            self.slots.release(self._slot.pop(request_id))
            self.blocks.release(self._table.pop(request_id))

    def export(self, request_id: str, num_tokens: int) -> SequenceState:
        """A copy of the request's state for its first `num_tokens` tokens (token ids filled by the caller)."""
        return export_state(self.slots, self.blocks, self._slot[request_id], self._table[request_id], num_tokens)

    def import_state(self, request_id: str, state: SequenceState) -> None:
        """Write a saved state into the request's freshly admitted slot and blocks."""
        import_state(self.slots, self.blocks, self._slot[request_id], self._table[request_id], state)

    def layer_views(self, request_ids: list[str], context_lens: tuple[int, ...], num_layers: int) -> list:
        slots = [self._slot[r] for r in request_ids]
        tables = [self._table[r] for r in request_ids]
        views: list = [None] * num_layers
        for i in self.spec.kda_layers:
            views[i] = self.slots.view(i, slots)
        for i in self.spec.mla_layers:
            views[i] = self.blocks.view(i, tables, context_lens)
        return views

    def usage(self) -> dict:
        return {"slots_free": self.slots.num_free, "slots_total": self.capacity.max_seqs,
                "blocks_free": self.blocks.num_free, "blocks_total": self.capacity.num_blocks}
