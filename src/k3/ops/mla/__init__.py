"""Gated NoPE MLA attention cores: naive (expanded K/V) and absorbed (latent) forms."""

from k3.ops.mla.absorbed import mla_absorbed
from k3.ops.mla.reference import mla_naive

__all__ = ["mla_absorbed", "mla_naive"]
