"""Kimi Delta Attention core: decay gate, recurrent reference (decode), chunked form (prefill)."""

from k3.ops.kda.chunk import chunk_kda
from k3.ops.kda.gate import kda_gate
from k3.ops.kda.reference import recurrent_kda

__all__ = ["chunk_kda", "kda_gate", "recurrent_kda"]
