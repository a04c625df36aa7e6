"""A bare model's decode state: B sequences that advance together, in plain tensors (`model.new_state(B)`).

It is a small runner of its own: before each forward, `K3State.step_states(batch, like)` builds the decode
rows' step states from its tensors (layers/step_state.py), as the engine's runner builds them from its
cache pools; prefill segments go through the per-layer state protocols (layers/state.py). KDA state is a
pool of B slots (slot i is sequence i); the MLA latents of each layer are one [B, capacity, R + Dr] buffer
that doubles when full (appending is amortised O(1)), read as a paged pool of B blocks of `capacity` rows.
Verify windows are the engine's: this state holds no rollback.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from k3.config.model import LAYER_KDA, K3Config
from k3.layers.batch import ForwardBatch
from k3.layers.state import StateLayout, state_layout
from k3.layers.step_state import KdaStep, MlaStep


@dataclass
class TokenCount:
    """How many tokens the B sequences hold: the one count, advanced by the model's forward after each call
    (K3ForCausalLM.forward) and read by every DenseMLACache of their state as the position its next rows
    go to."""
    value: int = 0


class DenseKDAState:
    """KDA state of B sequences: recurrent [B, H, K, V] fp32 and three conv tails [B, K_conv-1, P]."""

    def __init__(self, layout: StateLayout):
        self.layout = layout
        self.recurrent: torch.Tensor | None = None
        self.tails: tuple[torch.Tensor, ...] | None = None
        self._index: torch.Tensor | None = None   # arange(B): sequence i lives in slot i

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

    def step_state(self, b: int, positions: int, like: torch.Tensor) -> KdaStep:
        """The step state of all b sequences (zero state where none exists yet)."""
        if self.recurrent is None:
            L = self.layout
            self.recurrent = torch.zeros((b, L.kda_heads, L.kda_key_dim, L.kda_value_dim), device=like.device)
            self.tails = tuple(like.new_zeros((b, L.conv_tail, L.kda_channels)) for _ in range(3))
        if self._index is None or self._index.numel() != b:   # decode asks for the same one every step
            self._index = torch.arange(b, device=self.recurrent.device)
        return KdaStep(self.recurrent, self.tails, self._index, positions)


class DenseMLACache:
    """MLA latents of B sequences in one [B, capacity, R + Dr] buffer; rows go at the shared TokenCount's
    position (the cache never counts tokens itself)."""

    def __init__(self, layout: StateLayout, count: TokenCount):
        self.width, self.count = layout.mla_rank + layout.mla_extra, count
        self.buffer: torch.Tensor | None = None
        self._tables: torch.Tensor | None = None   # step_state's block tables: row i is sequence i's buffer

    def _reserve(self, b: int, extra: int, like: torch.Tensor) -> None:
        """Room for `extra` more tokens of b sequences, in like's dtype and device."""
        if self.buffer is not None and b != self.buffer.shape[0]:
            raise ValueError("a bare model's state holds sequences that advance together; use the engine for ragged batches")
        held = self.count.value
        need = held + extra
        if self.buffer is None or need > self.buffer.shape[1]:
            grown = like.new_empty((b, max(need, 2 * (0 if self.buffer is None else self.buffer.shape[1]), 64), self.width))
            if self.buffer is not None:
                grown[:, :held] = self.buffer[:, :held]
            self.buffer = grown

    def extend(self, seqs, c_kv, k_x):
        b, T, R = c_kv.shape
        self._reserve(b, T, c_kv)
        offset = self.count.value
        self.buffer[:, offset:offset + T, :R] = c_kv
        self.buffer[:, offset:offset + T, R:] = k_x
        return self.buffer[:, :offset + T, :R], self.buffer[:, :offset + T, R:], offset

    def step_state(self, b: int, positions: int, like: torch.Tensor) -> MlaStep:
        """The step state of all b sequences, one new token each: the buffer as b blocks of `capacity` rows."""
        if positions != 1:
            raise ValueError("a bare model's state holds no verify windows; they are the engine's (k3.engine)")
        self._reserve(b, 1, like)
        _, capacity, width = self.buffer.shape
        device = self.buffer.device
        if self._tables is None or self._tables.shape[0] != b or self._tables.device != device:
            self._tables = torch.arange(b, dtype=torch.int32, device=device).unsqueeze(1)
        held = self.count.value
        lens = torch.tensor([held + 1] * b, dtype=torch.int32, device=device)
        rows = torch.tensor([i * capacity + held for i in range(b)], dtype=torch.long, device=device)
        return MlaStep(self.buffer.view(b * capacity, width), self._tables, lens, capacity, rows, 1)


@dataclass
class K3State:
    """Decode state of B sequences that advance together: one state per layer, and the one count of the
    tokens they hold (its MLA caches write at that position; forward advances it)."""
    layers: list[DenseKDAState | DenseMLACache]
    count: TokenCount = field(default_factory=TokenCount)
    batch_size: int | None = field(default=None)

    @classmethod
    def new(cls, config: K3Config, batch_size: int) -> "K3State":
        layout, count = state_layout(config), TokenCount()
        layers = [DenseKDAState(layout) if t == LAYER_KDA else DenseMLACache(layout, count) for t in config.layer_types]
        return cls(layers, count, batch_size)

    @property
    def num_tokens(self) -> int:
        return self.count.value

    @num_tokens.setter
    def num_tokens(self, value: int) -> None:
        self.count.value = value

    def step_states(self, batch: ForwardBatch, like: torch.Tensor) -> list[tuple]:
        """Per layer, the step state of each of the batch's groups of decode rows (`batch.step_groups()`: at
        most one here, every sequence decoding one token). `like`: a compute row (dtype, device)."""
        groups = batch.step_groups()
        if not groups:
            return [()] * len(self.layers)
        if len(groups) != 1 or len(groups[0].seqs) != batch.num_seqs:
            raise ValueError("a bare model's state advances every sequence together; use the engine for ragged batches")
        return [(layer.step_state(batch.num_seqs, groups[0].tokens, like),) for layer in self.layers]
