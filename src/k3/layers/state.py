"""Per-sequence state of each layer kind, the protocols prefill reads it through, and its cost.

KDA layers keep a fixed-size recurrent matrix plus the short-conv tails per sequence; MLA layers
keep the normalised latent c_kv and the shared extra key k_x per token (never expanded K/V).
AttnRes and MoE keep nothing across tokens. Layers never allocate state: prefill segments
`gather`/`scatter` (KDA) or `extend` (MLA) through their owner's view; decode rows run on the step
states their owner builds before the step (layers/step_state.py). The owners: the engine's cache pools
(engine/memory/) and a bare model's dense K3State (model/dense_state.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from k3.config.model import K3Config


class KDAStateView(Protocol):
    def gather(self, seqs: list[int]) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
        """-> (recurrent [b, H, K, V] or None for zeros, conv tails (q, k, v) each [b, K_conv-1, P] or None)."""

    def scatter(self, seqs: list[int], recurrent: torch.Tensor, tails: tuple[torch.Tensor, ...]) -> None: ...


class MLACacheView(Protocol):
    def extend(self, seqs: list[int], c_kv: torch.Tensor, k_x: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Append [b, T, R] and [b, T, Dr] (sequences with equal cached length) -> the whole cache
        ([b, S, R], [b, S, Dr]) and the offset of the new tokens."""


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
