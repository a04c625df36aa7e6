"""KDA state in slots: per KDA layer, a [num_slots, H, K, V] fp32 recurrent tensor and three conv-tail
tensors [num_slots, K_conv-1, P]. A sequence owns one slot index for its whole life. Memory is
touched only as slots are used; a slot is zeroed when a sequence takes it."""

from __future__ import annotations

import torch

from k3.layers.state import StateSpec


class SlotPool:
    def __init__(self, spec: StateSpec, num_slots: int, tail_dtype: torch.dtype, device: torch.device):
        self.num_slots = num_slots
        shape = (num_slots, spec.kda_heads, spec.kda_key_dim, spec.kda_value_dim)
        tail = (num_slots, spec.conv_tail, spec.kda_channels)
        self.recurrent = {i: torch.empty(shape, dtype=torch.float32, device=device) for i in spec.kda_layers}
        self.tails = {i: tuple(torch.empty(tail, dtype=tail_dtype, device=device) for _ in range(3))
                      for i in spec.kda_layers}
        self._free = list(range(num_slots - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        """A zeroed slot (a new sequence starts from zero state)."""
        slot = self._free.pop()
        for layer, rec in self.recurrent.items():
            rec[slot].zero_()
            for t in self.tails[layer]:
                t[slot].zero_()
        return slot

    def release(self, slot: int) -> None:
        if slot in self._free:
            raise RuntimeError(f"KDA slot {slot} released twice")
        self._free.append(slot)

    def view(self, layer: int, slots: list[int]) -> "SlotView":
        return SlotView(self.recurrent[layer], self.tails[layer], slots)


class SlotView:
    """A layer's KDA state for one batch: batch sequence s lives in slot slots[s]."""

    def __init__(self, recurrent: torch.Tensor, tails: tuple[torch.Tensor, ...], slots: list[int]):
        self.recurrent, self.tails, self.slots = recurrent, tails, slots

    def _index(self, seqs: list[int]) -> torch.Tensor:
        return torch.tensor([self.slots[s] for s in seqs], dtype=torch.long, device=self.recurrent.device)

    def gather(self, seqs):
        idx = self._index(seqs)
        return self.recurrent[idx], tuple(t[idx] for t in self.tails)

    def scatter(self, seqs, recurrent, tails):
        idx = self._index(seqs)
        self.recurrent[idx] = recurrent.to(self.recurrent.dtype)
        for mine, new in zip(self.tails, tails):
            mine[idx] = new.to(mine.dtype)
