"""What an attention layer's decode rows read and write: the state tensors of one group of decode rows, built
by whoever owns the state (the engine's runner from its cache pools, `engine/memory/step_states.py`; a bare
model's K3State from its dense tensors, `model/dense_state.py`), once per step, before the model runs.

The vLLM habit: the runner builds the step's attention metadata, the layers only read it. A layer never
asks its owner where a decode row's state lives, and never tells it that a verify window starts (the
runner records windows for rollback itself). A batch's decode rows form `ForwardBatch.step_groups()`:
the sequences with one new token, then verify windows by length; a layer receives one step per group,
in that order. Prefill segments still go through the state protocols of layers/state.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from k3.ops.mla.paged import PagedLatents, paged_takes


@dataclass(frozen=True)
class KdaStep:
    """One group's KDA state, stepped in place: group sequence i lives in slot index[i] of the pools."""
    recurrent: torch.Tensor              # [slots, H, K, V] fp32
    tails: tuple[torch.Tensor, ...]      # q, k, v conv tails, each [slots, K_conv-1, P]
    index: torch.Tensor                  # [b] long
    positions: int                       # new tokens per sequence: 1 (decode) or a verify window's T
    # A verify window's inputs as the step computes them (q, k, v [b, T, P], g [b, T, H, D], beta [b, T, H]),
    # written by the step, so the runner can replay kept positions after a rejection; () for decode.
    replay: tuple[torch.Tensor, ...] = ()

    def kernel_takes(self) -> bool:
        """Whether the native step reads these tensors as they are."""
        return self.index.dtype == torch.long and all(
            t.is_contiguous() and t.dtype == torch.float32 for t in (self.recurrent, *self.tails))

    def kernel_state(self, kernels):
        """These tensors as the native step's `kernels.KdaState`."""
        return kernels.KdaState(recurrent=self.recurrent, tails=list(self.tails), index=self.index,
                                positions=self.positions, replay=list(self.replay))


@dataclass(frozen=True)
class MlaStep:
    """One group's paged MLA cache: the pool, one block table and length per query row (row i*T + t is
    sequence i at its position t, attending up to it), and the pool rows its new latents go to."""
    pool: torch.Tensor                   # [blocks * block_size, R + Dr]
    tables: torch.Tensor                 # [b * T, max_blocks] int32
    lens: torch.Tensor                   # [b * T] int32, counting the new rows
    block_size: int
    new_rows: torch.Tensor               # [b * T] long
    positions: int                       # T

    def paged(self, rank: int) -> PagedLatents:
        return PagedLatents(self.pool, self.tables, self.lens, self.block_size, rank)

    def kernel_takes(self) -> bool:
        """Whether the native step reads these tensors as they are (the paged kernel's own test)."""
        return paged_takes(self.pool, self.tables, self.lens) and self.new_rows.dtype == torch.long

    def kernel_state(self, kernels):
        """These tensors as the native step's `kernels.MlaState`."""
        return kernels.MlaState(pool=self.pool, tables=self.tables, lens=self.lens, block_size=self.block_size,
                                new_rows=self.new_rows)


def kda_replay(b: int, T: int, heads: int, head_dim: int, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Empty replay tensors for verify windows of T positions of b sequences (`KdaStep.replay`)."""
    P = heads * head_dim
    return tuple(like.new_empty(shape) for shape in ((b, T, P),) * 3 + ((b, T, heads, head_dim), (b, T, heads)))


# (position t, group rows or None for all, (recurrent pool, tail pools, slot index of those rows)) -> output:
# a KDA layer's step of one verify-window position (KimiDeltaAttention.window_step), for the rollback's replay.
WindowStep = Callable[[int, "list[int] | None", tuple], torch.Tensor]


def check_step_states(batch, state, step_states: tuple) -> None:
    """A layer with state (or with steps) needs one step per group of decode rows; only a stateless forward
    decodes from zero state without them."""
    groups = batch.step_groups()
    if (state is not None or step_states) and len(step_states) != len(groups):
        raise ValueError(f"{len(groups)} groups of decode rows (ForwardBatch.step_groups) need as many step states "
                         f"from the state's owner, got {len(step_states)}")
    if state is None and not step_states and any(g.window for g in groups):
        raise ValueError("verify windows need their sequences' state (a KdaStep and MlaStep per window group)")
