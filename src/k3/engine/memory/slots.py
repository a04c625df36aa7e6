"""KDA state in slots: per KDA layer, a [num_slots, H, K, V] fp32 recurrent tensor and three conv-tail
tensors [num_slots, K_conv-1, P]. A sequence owns one slot index for its whole life (the allocator
says which). Memory is touched only as slots are used (in 2 MB pages where the system has them:
ops/huge_pages.py; a decode step reads and writes every running sequence's state); the runner zeroes
a slot when a new sequence takes it."""

from __future__ import annotations

import torch

from k3.engine.memory.step_index import StepIndex
from k3.layers.state import StateLayout
from k3.ops import huge_pages


class SlotPool:
    def __init__(self, layout: StateLayout, num_slots: int, tail_dtype: torch.dtype, device: torch.device):
        self.num_slots = num_slots
        shape = (num_slots, layout.kda_heads, layout.kda_key_dim, layout.kda_value_dim)
        tail = (num_slots, layout.conv_tail, layout.kda_channels)
        self.recurrent = {i: huge_pages.empty(shape, torch.float32, device) for i in layout.kda_layers}
        self.tails = {i: tuple(torch.empty(tail, dtype=tail_dtype, device=device) for _ in range(3))
                      for i in layout.kda_layers}

    def zero(self, slot: int) -> None:
        """A new sequence starts from zero state."""
        for layer, rec in self.recurrent.items():
            rec[slot].zero_()
            for t in self.tails[layer]:
                t[slot].zero_()

    def view(self, layer: int, step: StepIndex) -> "SlotView":
        return SlotView(self.recurrent[layer], self.tails[layer], step)


class SlotView:
    """A layer's KDA state for one step's prefill segments: batch sequence s lives in slot step.slots[s]
    (decode rows run on the step states the runner builds: engine/memory/step_states.py)."""

    def __init__(self, recurrent: torch.Tensor, tails: tuple[torch.Tensor, ...], step: StepIndex):
        self.recurrent, self.tails, self.step = recurrent, tails, step

    def gather(self, seqs):
        idx = self.step.slot_index(seqs)
        return self.recurrent[idx], tuple(t[idx] for t in self.tails)

    def scatter(self, seqs, recurrent, tails):
        idx = self.step.slot_index(seqs)
        self.recurrent.index_copy_(0, idx, recurrent.to(self.recurrent.dtype))
        for mine, new in zip(self.tails, tails):
            mine.index_copy_(0, idx, new.to(mine.dtype))
