"""Sizes the engine's state from a memory budget, and holds the state tensors themselves.

Capacity: one KDA slot per concurrent sequence (`max_num_seqs`), the rest of the budget as MLA
blocks. `CachePools` holds the KDA slots, the MLA block pools and the block-table tensor; only the
runner moves data in and out of them (the allocator, owned by the scheduler, says who holds what).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from k3.engine.memory.blocks import BlockPool
from k3.engine.memory.slots import SlotPool
from k3.engine.memory.sequence_state import SequenceState, export_state, import_state
from k3.engine.memory.step_index import StepIndex
from k3.layers.state import StateLayout


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


def split_budget(layout: StateLayout, budget_bytes: int, max_num_seqs: int, block_size: int,
                 dtype: torch.dtype) -> Capacity:
    """The budget as `max_num_seqs` KDA slots and MLA blocks of `block_size` tokens for the rest."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    slot, token = layout.slot_bytes(itemsize), layout.token_bytes(itemsize)
    rest = budget_bytes - max_num_seqs * slot
    if rest < 0 or (token and rest < block_size * token):
        need = max_num_seqs * slot + block_size * token
        raise ValueError(f"cache memory budget {budget_bytes:,} B is too small for max_num_seqs={max_num_seqs}: "
                         f"need at least {need:,} B; raise the budget or lower max_num_seqs")
    num_blocks = rest // (block_size * token) if token else 0
    return Capacity(max_num_seqs, num_blocks, block_size, slot, token)


def fit_capacity(layout: StateLayout, budget_bytes: int, max_num_seqs: int, max_resident_seqs: int | None,
                 block_size: int, dtype: torch.dtype) -> Capacity:
    """`max_resident_seqs` slots if given; otherwise as many of `max_num_seqs` as the budget holds
    (at least one; fewer than max_num_seqs means the engine offloads waiting sequences' state)."""
    if max_resident_seqs is not None:
        if not 1 <= max_resident_seqs <= max_num_seqs:
            raise ValueError(f"max_resident_seqs must be in 1..max_num_seqs ({max_num_seqs})")
        return split_budget(layout, budget_bytes, max_resident_seqs, block_size, dtype)
    for seqs in range(max_num_seqs, 0, -1):
        try:
            return split_budget(layout, budget_bytes, seqs, block_size, dtype)
        except ValueError:
            if seqs == 1:
                raise
    raise AssertionError("unreachable")


class CachePools:
    def __init__(self, layout: StateLayout, capacity: Capacity, dtype: torch.dtype, device: torch.device):
        self.layout, self.capacity = layout, capacity
        self.slots = SlotPool(layout, capacity.max_seqs, dtype, device)
        self.blocks = BlockPool(layout, capacity.num_blocks, capacity.block_size, dtype, device)
        # Row `slot` is the block table of the sequence in that slot; written once, when it is placed.
        self.block_tables = torch.zeros(capacity.max_seqs, max(1, capacity.num_blocks), dtype=torch.int32,
                                        device=device)

    def place(self, placement, state: SequenceState | None = None) -> None:
        """A sequence takes its slot and blocks: zero state, or `state` restored into them."""
        if placement.blocks:
            self.block_tables[placement.slot, :len(placement.blocks)] = torch.tensor(placement.blocks, dtype=torch.int32)
        if state is None:
            self.slots.zero(placement.slot)
        else:
            import_state(self.slots, self.blocks, placement.slot, list(placement.blocks), state)

    def export(self, placement, num_tokens: int) -> SequenceState:
        """A copy of a sequence's state for its first `num_tokens` tokens (token ids filled by the caller)."""
        return export_state(self.slots, self.blocks, placement.slot, list(placement.blocks), num_tokens)

    def step_index(self, placements: list, context_lens: tuple[int, ...]) -> StepIndex:
        """The index tensors of a step's sequences (in batch order), built once and shared by every layer."""
        return StepIndex([p.slot for p in placements], [p.blocks for p in placements], context_lens,
                         self.block_tables, self.capacity.block_size)

    def layer_views(self, step: StepIndex, num_layers: int) -> list:
        """One view per layer for a step's prefill segments."""
        views: list = [None] * num_layers
        for i in self.layout.kda_layers:
            views[i] = self.slots.view(i, step)
        for i in self.layout.mla_layers:
            views[i] = self.blocks.view(i, step)
        return views
