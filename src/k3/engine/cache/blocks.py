"""Paged MLA cache: per MLA layer one pool of rows [num_blocks * block_size, R + Dr] holding the
normalised latent c_kv and the shared extra key k_x of each cached token (576 values in K3).
A sequence's block table maps its token position p to row table[p // bs] * bs + p % bs.
Rows are written before they are read, so pools start uninitialised (untouched memory)."""

from __future__ import annotations

import torch

from k3.layers.state import StateSpec


class BlockPool:
    def __init__(self, spec: StateSpec, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device):
        self.num_blocks, self.block_size, self.rank = num_blocks, block_size, spec.mla_rank
        width = spec.mla_rank + spec.mla_extra
        self.pools = {i: torch.empty(num_blocks * block_size, width, dtype=dtype, device=device) for i in spec.mla_layers}
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise RuntimeError(f"MLA cache: {n} blocks requested, {len(self._free)} free")
        return [self._free.pop() for _ in range(n)]

    def release(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))

    def view(self, layer: int, tables: list[list[int]], context_lens: tuple[int, ...]) -> "PagedMLAView":
        return PagedMLAView(self.pools[layer], tables, context_lens, self.block_size, self.rank)


class PagedMLAView:
    def __init__(self, pool: torch.Tensor, tables: list[list[int]], context_lens, block_size: int, rank: int):
        self.pool, self.tables, self.context_lens = pool, tables, context_lens
        self.block_size, self.rank = block_size, rank

    def _rows(self, seqs: list[int], start: int, stop: int) -> torch.Tensor:
        """[b, stop-start] pool rows of positions start..stop-1 of each sequence."""
        pos = torch.arange(start, stop)
        used = -(-stop // self.block_size)
        tables = torch.tensor([self.tables[s][:used] for s in seqs], dtype=torch.long)
        return tables[:, pos // self.block_size] * self.block_size + pos % self.block_size

    def extend(self, seqs, c_kv, k_x):
        ctx = self.context_lens[seqs[0]]
        T = c_kv.shape[1]
        self.pool[self._rows(seqs, ctx, ctx + T)] = torch.cat((c_kv, k_x), dim=-1).to(self.pool.dtype)
        cached = self.pool[self._rows(seqs, 0, ctx + T)].to(c_kv.dtype)
        return cached[..., :self.rank], cached[..., self.rank:], ctx
