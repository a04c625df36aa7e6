"""Kimi Delta Attention core: decay gate, recurrent reference (decode), chunked form (prefill), and the
one-token step on state slots in place."""

from k3.ops.kda.chunk import chunk_kda
from k3.ops.kda.gate import kda_gate, kda_gates
from k3.ops.kda.reference import recurrent_kda
from k3.ops.kda.step import kda_step, kda_step_reference, kda_window, kda_window_reference

__all__ = ["chunk_kda", "kda_gate", "kda_gates", "kda_step", "kda_step_reference", "kda_window", "kda_window_reference", "recurrent_kda"]
