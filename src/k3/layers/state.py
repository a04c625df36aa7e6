"""Per-sequence decode state of each layer kind, and what it costs (spec section 5).

KDA layers keep a fixed-size recurrent matrix plus the short-conv tails; MLA layers keep the
normalised latent c_kv and the shared extra key k_x per token (never expanded K/V). AttnRes and
MoE keep nothing across tokens. The batch dimension B lets one state hold several sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from k3.config.model import LAYER_KDA, K3Config


@dataclass
class KDAState:
    recurrent: torch.Tensor | None = None      # [B, H, K, V] fp32
    conv: tuple[torch.Tensor, ...] | None = None  # q, k, v tails, each [B, K_conv-1, H*K]


@dataclass
class MLACache:
    c_kv: torch.Tensor | None = None   # [B, S, kv_lora_rank]
    k_x: torch.Tensor | None = None    # [B, S, qk_rope_head_dim]

    @property
    def length(self) -> int:
        return 0 if self.c_kv is None else self.c_kv.shape[1]

    def extend(self, c_kv: torch.Tensor, k_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Append this step's [B, T, *] latents; return (all c_kv, all k_x, offset of the new tokens)."""
        offset = self.length
        if self.c_kv is not None:
            c_kv = torch.cat((self.c_kv, c_kv), dim=1)
            k_x = torch.cat((self.k_x, k_x), dim=1)
        self.c_kv, self.k_x = c_kv, k_x
        return c_kv, k_x, offset


def new_layer_states(config: K3Config) -> list[KDAState | MLACache]:
    return [KDAState() if t == LAYER_KDA else MLACache() for t in config.layer_types]


def kda_state_bytes(c: K3Config, conv_bytes_per_value: int = 2) -> tuple[int, int]:
    """(recurrent fp32 bytes, conv-tail bytes) per sequence over all KDA layers."""
    n = len(c.kda_layers)
    recurrent = n * c.kda_num_heads * c.kda_head_dim * c.kda_head_dim * 4
    conv = n * 3 * c.kda_proj_dim * (c.short_conv_kernel_size - 1) * conv_bytes_per_value
    return recurrent, conv


def mla_cache_bytes_per_token(c: K3Config, bytes_per_value: int = 2) -> int:
    return len(c.mla_layers) * (c.kv_lora_rank + c.qk_rope_head_dim) * bytes_per_value
