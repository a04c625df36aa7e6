"""Kimi Delta Attention core: decay gate, recurrent reference (decode), chunked form (prefill), and the
native one-token step."""

from k3.ops.kda.chunk import chunk_kda
from k3.ops.kda.gate import kda_gate
from k3.ops.kda.native_step import native_kda_step, use_native_kda_step
from k3.ops.kda.reference import recurrent_kda

__all__ = ["chunk_kda", "kda_gate", "native_kda_step", "recurrent_kda", "use_native_kda_step"]
