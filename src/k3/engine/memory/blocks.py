"""Paged MLA cache: per MLA layer one pool of rows [num_blocks * block_size, R + Dr] holding the
normalised latent c_kv and the shared extra key k_x of each cached token (576 values in K3).
A sequence's block table maps its token position p to row table[p // bs] * bs + p % bs.
Rows are written before they are read, so pools start uninitialised (untouched memory; touched in 2 MB
pages where the system has them: ops/huge_pages.py)."""

from __future__ import annotations

import torch

from k3.engine.memory.step_index import StepIndex
from k3.layers.state import StateLayout
from k3.ops import huge_pages


class BlockPool:
    def __init__(self, layout: StateLayout, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device):
        self.num_blocks, self.block_size, self.rank = num_blocks, block_size, layout.mla_rank
        width = layout.mla_rank + layout.mla_extra
        self.pools = {i: huge_pages.empty((num_blocks * block_size, width), dtype, device) for i in layout.mla_layers}

    def view(self, layer: int, step: StepIndex) -> "PagedMLAView":
        return PagedMLAView(self.pools[layer], step, self.rank)


class PagedMLAView:
    """A layer's paged MLA cache for one step's prefill segments (decode rows run on the step states the
    runner builds: engine/memory/step_states.py)."""

    def __init__(self, pool: torch.Tensor, step: StepIndex, rank: int):
        self.pool, self.step, self.rank = pool, step, rank

    def extend(self, seqs, c_kv, k_x):
        """Prefill segments (equal cached length): write the new rows, return the whole history."""
        ctx = self.step.context_lens[seqs[0]]
        T = c_kv.shape[1]
        self.pool[self.step.rows(seqs, ctx, ctx + T)] = torch.cat((c_kv, k_x), dim=-1).to(self.pool.dtype)
        cached = self.pool[self.step.rows(seqs, 0, ctx + T)].to(c_kv.dtype)
        return cached[..., :self.rank], cached[..., self.rank:], ctx
