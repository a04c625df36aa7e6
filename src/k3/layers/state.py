"""Per-sequence decode state of each layer kind, the protocols layers read it through, and its cost.

KDA layers keep a fixed-size recurrent matrix plus the short-conv tails per sequence; MLA layers
keep the normalised latent c_kv and the shared extra key k_x per token (never expanded K/V).
AttnRes and MoE keep nothing across tokens. Layers never allocate engine state: prefill segments
`gather`/`scatter` (KDA) or `extend` (MLA) through a view; decode works on the state in place
(`slot_tensors` for KDA, `append_decode` for MLA's paged cache), so the engine backs it with slots
and paged blocks. The Dense* classes are the simple backing for B sequences that advance together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from k3.config.model import LAYER_KDA, K3Config
from k3.ops.mla.paged import PagedLatents, write_rows

ZeroState = Callable[[int], tuple[torch.Tensor, tuple[torch.Tensor, ...]]]   # b -> zero (recurrent, tails)
# (position t, group rows or None for all, (recurrent pool, tail pools, slot index of those rows)) -> output
WindowStep = Callable[[int, "list[int] | None", tuple], torch.Tensor]
WindowRun = Callable[[tuple], torch.Tensor]   # slot tensors -> every position of a window at once


class KDAStateView(Protocol):
    def gather(self, seqs: list[int]) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
        """-> (recurrent [b, H, K, V] or None for zeros, conv tails (q, k, v) each [b, K_conv-1, P] or None)."""

    def scatter(self, seqs: list[int], recurrent: torch.Tensor, tails: tuple[torch.Tensor, ...]) -> None: ...

    def slot_tensors(self, seqs: list[int], zeros: ZeroState
                     ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor]:
        """-> (recurrent pool [slots, H, K, V], tail pools, index [b] long): sequence seqs[i] lives in slot
        index[i], to be updated in place. `zeros(b)` makes zero state where none exists yet."""

    def start_window(self, seqs: list[int], T: int, step: WindowStep, zeros: ZeroState
                     ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], torch.Tensor]:
        """Verify windows of T positions about to be stepped in place by their caller -> slot_tensors. An
        engine view first keeps the slots' state and `step`, so it can restore the state before the window
        and replay its first positions (see WindowLog)."""

    def run_window(self, seqs: list[int], T: int, step: WindowStep, zeros: ZeroState,
                   window: WindowRun | None = None) -> torch.Tensor:
        """Verify windows of T positions (`start_window`), then step(t, None, slot_tensors) for t = 0..T-1
        on the state in place -> the outputs concatenated along positions ([b, T, ...]); `window(slot_tensors)`,
        when given, runs all T positions in one call with the same result."""


class MLACacheView(Protocol):
    def extend(self, seqs: list[int], c_kv: torch.Tensor, k_x: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Append [b, T, R] and [b, T, Dr] (sequences with equal cached length) -> the whole cache
        ([b, S, R], [b, S, Dr]) and the offset of the new tokens."""

    def append_decode(self, seqs: list[int], c_kv: torch.Tensor, k_x: torch.Tensor) -> PagedLatents:
        """Append one token per sequence ([b, R], [b, Dr]; cached lengths may differ) -> the paged
        latents decode attends over, in place."""

    def step_rows(self, seqs: list[int], rank: int, extra: int, like: torch.Tensor, positions: int = 1
                    ) -> tuple[PagedLatents, torch.Tensor]:
        """Where append_decode (positions 1) or append_window (verify windows of `positions`) would put the
        new rows, for a caller that writes them itself: (the paged latents attended over once they are
        written, one query row per new position; their pool rows [b * positions] long). Changes nothing a
        later call sees (a pool may grow), so a caller may still fall back to append_decode/append_window.
        Neither counts tokens: the cache's length has one owner, outside it (the engine's scheduler, or
        the TokenCount of a bare model's K3State). `like`: a compute tensor (dtype, device)."""

    def append_window(self, seqs: list[int], c_kv: torch.Tensor, k_x: torch.Tensor) -> PagedLatents:
        """Append verify windows ([b, T, R], [b, T, Dr]; cached lengths may differ) -> paged latents with
        one query row per window position (row i*T + t attends its sequence up to position t), in place."""


def run_window_on(pools: tuple, T: int, step: WindowStep, window: WindowRun | None) -> torch.Tensor:
    """A window of T positions on slot tensors `pools`, in place: `window(pools)` in one call, or step t for
    t = 0..T-1 -> the outputs concatenated along positions."""
    return window(pools) if window is not None else torch.cat([step(t, None, pools) for t in range(T)], dim=1)


class DenseKDAState:
    """KDA state of B sequences as plain tensors."""

    def __init__(self):
        self.recurrent: torch.Tensor | None = None
        self.tails: tuple[torch.Tensor, ...] | None = None
        self._index: tuple[tuple[int, ...], torch.Tensor] | None = None   # the last slot_tensors index

    def _covers_all(self, seqs) -> bool:
        return list(seqs) == list(range(self.recurrent.shape[0]))

    def gather(self, seqs):
        if self.recurrent is None:
            return None, None
        if self._covers_all(seqs):  # the common case: no copy (the KDA cores never write their input state)
            return self.recurrent, self.tails
        return self.recurrent[seqs], tuple(t[seqs] for t in self.tails)

    def scatter(self, seqs, recurrent, tails):
        if self.recurrent is None or self._covers_all(seqs):
            # Every sequence: keep the new state itself (a fresh tensor from the core); the tails are
            # views into the step's whole conv input, so they are copied to let that go.
            self.recurrent, self.tails = recurrent.contiguous(), tuple(t.contiguous().clone() for t in tails)
            return
        self.recurrent[seqs] = recurrent
        for mine, new in zip(self.tails, tails):
            mine[seqs] = new

    def slot_tensors(self, seqs, zeros):
        if self.recurrent is None:
            self.recurrent, self.tails = zeros(len(seqs))
        seqs = tuple(seqs)
        if self._index is None or self._index[0] != seqs:   # decode asks for the same one every step
            self._index = seqs, torch.tensor(seqs, dtype=torch.long, device=self.recurrent.device)
        return self.recurrent, self.tails, self._index[1]

    def start_window(self, seqs, T, step, zeros):
        return self.slot_tensors(seqs, zeros)   # nothing to undo: windows are the engine's

    def run_window(self, seqs, T, step, zeros, window=None):
        return run_window_on(self.start_window(seqs, T, step, zeros), T, step, window)


class SlotTensors:
    """A KDAStateView over given pools: sequence i in slot index[i] of the recurrent pool and the tail pools,
    stepped in place (the reference of `kda_layer_step`, which takes the pools themselves)."""

    def __init__(self, recurrent: torch.Tensor, tails: tuple[torch.Tensor, ...], index: torch.Tensor):
        self.pools = recurrent, tuple(tails), index

    def slot_tensors(self, seqs, zeros):
        return self.pools

    def start_window(self, seqs, T, step, zeros):
        return self.pools

    def run_window(self, seqs, T, step, zeros, window=None):
        return run_window_on(self.pools, T, step, window)


class PagedRows:
    """An MLACacheView over a given paged pool, its tables and lengths (counting the new rows) and the pool
    rows the new latents go to (the reference of `mla_layer_step`, which takes the pool itself)."""

    def __init__(self, pool: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor, block_size: int, rank: int,
                 new_rows: torch.Tensor):
        self.paged = PagedLatents(pool, tables, lens, block_size, rank)
        self.new_rows = new_rows

    def append_decode(self, seqs, c_kv, k_x):
        write_rows(self.paged.pool, self.new_rows, c_kv, k_x)
        return self.paged

    append_window = append_decode   # [b, T, ...] rows go to new_rows in the same order, position by position


@dataclass
class TokenCount:
    """How many tokens B sequences that advance together hold: the one count, advanced by the model's
    forward after each call (K3ForCausalLM.forward) and read by every DenseMLACache of their state as the
    position its next rows go to."""
    value: int = 0


class DenseMLACache:
    """MLA latents of B sequences that advance together, in one [B, capacity, R + Dr] buffer that doubles
    when full (appending is amortised O(1), never a copy of the history per token). Rows go at the shared
    TokenCount's position; the cache never counts tokens itself."""

    def __init__(self, count: TokenCount):
        self.buffer: torch.Tensor | None = None
        self.count = count
        self.rank = 0
        self._tables: torch.Tensor | None = None   # step_rows' block tables: row i is sequence i's buffer

    def _reserve(self, b: int, extra: int, like: torch.Tensor, width: int) -> None:
        """Room for `extra` more tokens of b sequences, rows `width` wide, in like's dtype and device."""
        if self.buffer is not None and b != self.buffer.shape[0]:
            raise ValueError("DenseMLACache holds sequences that advance together; use the engine for ragged batches")
        held = self.count.value
        need = held + extra
        if self.buffer is None or need > self.buffer.shape[1]:
            grown = like.new_empty((b, max(need, 2 * (0 if self.buffer is None else self.buffer.shape[1]), 64), width))
            if self.buffer is not None:
                grown[:, :held] = self.buffer[:, :held]
            self.buffer = grown

    def extend(self, seqs, c_kv, k_x):
        b, T, R = c_kv.shape
        self.rank = R
        self._reserve(b, T, c_kv, R + k_x.shape[-1])
        offset = self.count.value
        self.buffer[:, offset:offset + T, :R] = c_kv
        self.buffer[:, offset:offset + T, R:] = k_x
        return self.buffer[:, :offset + T, :R], self.buffer[:, :offset + T, R:], offset

    def append_decode(self, seqs, c_kv, k_x):
        paged, rows = self.step_rows(seqs, c_kv.shape[-1], k_x.shape[-1], c_kv)
        write_rows(paged.pool, rows, c_kv, k_x)
        return paged

    def step_rows(self, seqs, rank, extra, like, positions=1):
        if positions != 1:
            raise ValueError("DenseMLACache holds no verify windows; they are the engine's (k3.engine)")
        b = len(seqs)
        self.rank = rank
        self._reserve(b, 1, like, rank + extra)
        _, capacity, width = self.buffer.shape
        device = self.buffer.device
        if self._tables is None or self._tables.shape[0] != b or self._tables.device != device:
            self._tables = torch.arange(b, dtype=torch.int32, device=device).unsqueeze(1)
        held = self.count.value
        lens = torch.tensor([held + 1] * b, dtype=torch.int32, device=device)
        rows = torch.tensor([i * capacity + held for i in range(b)], dtype=torch.long, device=device)
        return PagedLatents(self.buffer.view(b * capacity, width), self._tables, lens, capacity, rank), rows

def new_layer_states(config: K3Config, count: TokenCount) -> list[DenseKDAState | DenseMLACache]:
    return [DenseKDAState() if t == LAYER_KDA else DenseMLACache(count) for t in config.layer_types]


def kda_state_bytes(c: K3Config, conv_bytes_per_value: int = 2) -> tuple[int, int]:
    """(recurrent fp32 bytes, conv-tail bytes) per sequence over all KDA layers."""
    layout = state_layout(c)
    return layout.recurrent_bytes(), layout.conv_bytes(conv_bytes_per_value)


def mla_cache_bytes_per_token(c: K3Config, bytes_per_value: int = 2) -> int:
    return state_layout(c).token_bytes(bytes_per_value)


@dataclass(frozen=True)
class StateLayout:
    """What one sequence's cached state is made of, so an engine can allocate it without the layers."""
    kda_layers: tuple[int, ...]
    kda_heads: int
    kda_key_dim: int
    kda_value_dim: int
    conv_tail: int           # K_conv - 1 positions kept per channel
    kda_channels: int        # H * head_dim, per q/k/v
    mla_layers: tuple[int, ...]
    mla_rank: int            # c_kv width
    mla_extra: int           # k_x width

    def recurrent_bytes(self) -> int:
        """fp32 recurrent state of one sequence, all KDA layers."""
        return len(self.kda_layers) * self.kda_heads * self.kda_key_dim * self.kda_value_dim * 4

    def conv_bytes(self, tail_itemsize: int) -> int:
        """q, k, v short-conv tails of one sequence, all KDA layers."""
        return len(self.kda_layers) * 3 * self.conv_tail * self.kda_channels * tail_itemsize

    def slot_bytes(self, tail_itemsize: int) -> int:
        return self.recurrent_bytes() + self.conv_bytes(tail_itemsize)

    def token_bytes(self, itemsize: int) -> int:
        return len(self.mla_layers) * (self.mla_rank + self.mla_extra) * itemsize


def state_layout(c: K3Config) -> StateLayout:
    return StateLayout(c.kda_layers, c.kda_num_heads, c.kda_head_dim, c.kda_head_dim, c.short_conv_kernel_size - 1,
                     c.kda_proj_dim, c.mla_layers, c.kv_lora_rank, c.qk_rope_head_dim)
