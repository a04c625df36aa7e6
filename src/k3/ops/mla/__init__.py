"""Gated NoPE MLA attention cores: naive (expanded K/V, the reference), absorbed (latent, decode),
SDPA (expanded once, fused attention, prefill) and paged decode (latent, reading a paged cache in place)."""

from k3.ops.mla.absorbed import mla_absorbed
from k3.ops.mla.paged import PagedLatents, mla_paged_decode, mla_paged_decode_reference, paged_decode
from k3.ops.mla.reference import mla_naive
from k3.ops.mla.sdpa import mla_sdpa

__all__ = ["PagedLatents", "mla_absorbed", "mla_naive", "mla_paged_decode", "mla_paged_decode_reference",
           "mla_sdpa", "paged_decode"]
