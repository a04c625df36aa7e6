"""The index tensors one step needs to find its sequences' state, built once per step (never per layer).

Every KDA layer of a step asks for the same slot indices and every MLA layer for the same pool rows
and block tables; each is computed on first request, on the model's device, and reused. The block
tables come from the runner's persistent [slots, max_blocks] table tensor, written once per request
when it is admitted.
"""

from __future__ import annotations

import torch


class StepIndex:
    def __init__(self, slots: list[int], blocks: list[tuple[int, ...]], context_lens: tuple[int, ...],
                 block_tables: torch.Tensor, block_size: int):
        self.slots, self.blocks, self.context_lens = slots, blocks, context_lens
        self.block_tables, self.block_size = block_tables, block_size
        self.device = block_tables.device
        self._memo: dict = {}

    def _cached(self, key, make):
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def slot_index(self, seqs: list[int]) -> torch.Tensor:
        """[b] long: the KDA slot of each batch sequence in seqs."""
        return self._cached(("slots", tuple(seqs)), lambda: torch.tensor(
            [self.slots[s] for s in seqs], dtype=torch.long, device=self.device))

    def rows(self, seqs: list[int], start: int, stop: int) -> torch.Tensor:
        """[b, stop-start] pool rows of positions start..stop-1 of each sequence (prefill segments)."""
        def make():
            pos = torch.arange(start, stop)
            used = -(-stop // self.block_size)
            tables = torch.tensor([self.blocks[s][:used] for s in seqs], dtype=torch.long)
            return (tables[:, pos // self.block_size] * self.block_size + pos % self.block_size).to(self.device)
        return self._cached(("rows", tuple(seqs), start, stop), make)

    def window(self, seqs: list[int], T: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(block tables [b*T, max_blocks] int32, lengths [b*T] int32, new-token rows [b*T] long) for
        verify windows of T positions: row i*T + t is sequence seqs[i] at position context + t."""
        if T == 1:
            return self._cached(("window", tuple(seqs), 1), lambda: self._decode(seqs))

        def make():
            ctx = torch.tensor([self.context_lens[s] for s in seqs], dtype=torch.long, device=self.device)
            pos = (ctx.unsqueeze(1) + torch.arange(T, device=self.device)).reshape(-1)
            used = -(-(int(pos.max()) + 1) // self.block_size)
            tables = self.block_tables[self.slot_index(seqs), :used].repeat_interleave(T, dim=0)
            new_rows = tables.gather(1, (pos // self.block_size).unsqueeze(1)).squeeze(1).long() * self.block_size \
                + pos % self.block_size
            return tables, (pos + 1).to(torch.int32), new_rows
        return self._cached(("window", tuple(seqs), T), make)

    def _decode(self, seqs: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """window(seqs, 1), a decode step's, from the positions as Python ints: the same three tensors
        with one indexing op and two small tensors instead of a dozen ops (each costs tens of µs on a
        decode step, after the weight streams have evicted ATen's working set)."""
        ctx = [self.context_lens[s] for s in seqs]
        bs = self.block_size
        used = -(-(max(ctx) + 1) // bs)
        tables = self.block_tables[self.slot_index(seqs), :used]
        lens = torch.tensor([c + 1 for c in ctx], dtype=torch.int32, device=self.device)
        rows = torch.tensor([self.blocks[s][c // bs] * bs + c % bs for s, c in zip(seqs, ctx)], dtype=torch.long,
                            device=self.device)
        return tables, lens, rows
