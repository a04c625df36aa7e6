"""Gated NoPE MLA attention cores: naive (expanded K/V, the reference), absorbed (latent, decode) and
SDPA (expanded once, fused attention, prefill)."""

from k3.ops.mla.absorbed import mla_absorbed
from k3.ops.mla.reference import mla_naive
from k3.ops.mla.sdpa import mla_sdpa

__all__ = ["mla_absorbed", "mla_naive", "mla_sdpa"]
