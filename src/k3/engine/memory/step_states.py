"""The runner's metadata builder (vLLM's habit): the step states of a step's decode rows, built from the cache
pools once per step, before the model runs (layers/step_state.py).

Per attention layer, one state per group of decode rows (`ForwardBatch.step_groups()`): a KDA layer's
recurrent and tail pools with the group's slot indices (and, for verify windows, fresh tensors the window's
inputs go to, for the rollback's replay); an MLA layer's block pool with the group's block tables, lengths
and the rows its new latents go to. The index tensors are built once per step by the StepIndex and
shared by every layer.
"""

from __future__ import annotations

import torch

from k3.engine.memory.step_index import StepIndex
from k3.layers.batch import ForwardBatch
from k3.layers.step_state import KdaStep, MlaStep, kda_replay


def build_step_states(pools, step: StepIndex, batch: ForwardBatch, num_layers: int, like: torch.Tensor) -> list[tuple]:
    """pools: the runner's CachePools -> per layer, a tuple of step states (one per step group; () for a
    batch without decode rows). `like`: a compute row (dtype, device) for the replay tensors."""
    out: list[tuple] = [()] * num_layers
    groups = batch.step_groups()
    if not groups:
        return out
    layout, slots, blocks = pools.layout, pools.slots, pools.blocks
    for i in layout.kda_layers:
        out[i] = tuple(KdaStep(slots.recurrent[i], slots.tails[i], step.slot_index(g.seqs), g.tokens,
                               kda_replay(len(g.seqs), g.tokens, layout.kda_heads, layout.kda_key_dim, like)
                               if g.window else ())
                       for g in groups)
    # Block tables, lengths and new rows, shared by every MLA layer (a model without MLA layers has no blocks).
    windows = [step.window(g.seqs, g.tokens) for g in groups] if layout.mla_layers else []
    for i in layout.mla_layers:
        out[i] = tuple(MlaStep(blocks.pools[i], tables, lens, step.block_size, rows, g.tokens)
                       for g, (tables, lens, rows) in zip(groups, windows))
    return out
