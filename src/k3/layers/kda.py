"""KimiDeltaAttention layer (spec §4.3): projections, short convs, gates, delta-rule core, gated norm.

Prefill of more than `CHUNK_MIN_TOKENS` tokens runs the chunked core; shorter segments run the
recurrence. Decode (one new token per sequence) runs the whole batch in one step on the state slots
in place; a verify window (speculative decoding) runs that same step once per position (all positions
in one call), and hands the step to its state view so the engine can replay a kept prefix after a
rejection. The decode plan's native step does both in one call (`decode_state`, `begin_step`). All
continue from and update the sequences' state when one is given.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.config.model import K3Config
from k3.layers.basic import Linear, WeightOnly, frozen
from k3.layers.decode_weights import float_weights, fused_matrix, matrix
from k3.layers.state import KDAStateView
from k3.layers.batch import ForwardBatch
from k3.layers.fused import project
from k3.ops.conv import short_conv_silu
from k3.ops.kda import chunk_kda, kda_gates, kda_step, kda_window, recurrent_kda
from k3.ops.norm import gated_rms_norm, l2_norm

CHUNK_MIN_TOKENS = 16


class KimiDeltaAttention(nn.Module):
    def __init__(self, c: K3Config):
        super().__init__()
        h, P, D = c.hidden_size, c.kda_proj_dim, c.kda_head_dim
        self.num_heads, self.head_dim = c.kda_num_heads, D
        self.eps, self.lower_bound = c.rms_norm_eps, c.gate_lower_bound
        self.q_proj, self.k_proj, self.v_proj = Linear(h, P), Linear(h, P), Linear(h, P)
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (
            WeightOnly(P, 1, c.short_conv_kernel_size, dtype=torch.float32) for _ in range(3))
        self.f_a_proj, self.f_b_proj = Linear(h, D), Linear(D, P)
        self.b_proj = Linear(h, c.kda_num_heads)
        # Stored padded to head_dim in K3; the loader narrows it to the num_heads meaningful entries.
        self.A_log = frozen(c.kda_num_heads, dtype=torch.float32)
        self.dt_bias = frozen(P, dtype=torch.float32)
        if c.use_full_rank_gate:
            self.g_proj = Linear(h, P)
        else:
            self.g_a_proj, self.g_b_proj = Linear(h, D), Linear(D, P)
        self.o_norm = WeightOnly(D, dtype=torch.float32)
        self.o_proj = Linear(P, h)
        gate = "g_proj" if c.use_full_rank_gate else "g_a_proj"
        self.input_names = ("q_proj", "k_proj", "v_proj", gate, "f_a_proj", "b_proj")

    def shared_inputs(self) -> list[tuple[str, ...]]:
        """The projections of the layer input, as one matrix (see layers/fused.py)."""
        return [self.input_names]

    def _project(self, x: torch.Tensor) -> list[torch.Tensor]:
        """x [N, hidden] -> q, k, v [N, P], output gate [N, P], f_a [N, D], b [N, H]."""
        q, k, v, gate, f_a, b = project(self, self.input_names, x)
        return [q, k, v, gate if hasattr(self, "g_proj") else self.g_b_proj(gate), f_a, b]

    def _core(self, q, k, v, g, beta, tails, initial):
        """One group of b aligned segments: q, k, v [b, T, P] (projected), g [b, T, H, D], beta [b, T, H]
        -> (o [b, T, H, D] fp32, final recurrent state, new conv tails)."""
        b, T, _ = q.shape
        H, D = self.num_heads, self.head_dim
        tails = tails or (None, None, None)
        (q, tq), (k, tk), (v, tv) = (short_conv_silu(x, w, t) for x, w, t in zip((q, k, v), self._conv_weights(), tails))
        q, k = l2_norm(q.view(b, T, H, D)), l2_norm(k.view(b, T, H, D))
        core = chunk_kda if T > CHUNK_MIN_TOKENS else recurrent_kda
        o, final = core(q, k, v.view(b, T, H, D), g, beta, D ** -0.5, initial)
        return o, final, (tq, tk, tv)

    def _conv_weights(self) -> list[torch.Tensor]:
        return [c.weight[:, 0, :] for c in (self.q_conv1d, self.k_conv1d, self.v_conv1d)]

    def _zero_state(self, x: torch.Tensor):
        """b -> zero (recurrent [b, H, D, D] fp32, conv tails 3 x [b, K_conv-1, P] in x.dtype)."""
        H, D = self.num_heads, self.head_dim
        w = self.q_conv1d.weight
        return lambda b: (torch.zeros((b, H, D, D), dtype=torch.float32, device=x.device),
                          tuple(torch.zeros((b, w.shape[-1] - 1, w.shape[0]), dtype=x.dtype, device=x.device)
                                for _ in range(3)))

    def _decode(self, group, q, k, v, g, beta, state: KDAStateView | None) -> torch.Tensor:
        """One new token for each of the group's sequences, on their state slots in place -> o [b, 1, H, D]."""
        zeros = self._zero_state(q)
        if state is None:
            rec, tails = zeros(len(group.seqs))
            index = torch.arange(len(group.seqs), device=q.device)
        else:
            rec, tails, index = state.slot_tensors(group.seqs, zeros)
        step = (group.take(t) for t in (q, k, v, g, beta))
        return kda_step(*step, self._conv_weights(), rec, tails, index, self.head_dim ** -0.5)

    def _window(self, group, q, k, v, g, beta, state: KDAStateView) -> torch.Tensor:
        """Verify windows [b, T]: position t of every sequence stepped exactly as `_decode` steps a token
        -> o [b, T, H, D]."""
        inputs = [group.take(t) for t in (q, k, v, g, beta)]

        def window(pools) -> torch.Tensor:   # every position at once (the same bits as the steps in turn)
            rec, tails, index = pools
            return kda_window(*inputs, self._conv_weights(), rec, tails, index, self.head_dim ** -0.5)

        return state.run_window(group.seqs, group.tokens, self._window_step(inputs), self._zero_state(q), window)

    def _window_step(self, inputs: list[torch.Tensor]):
        """A window's WindowStep on its inputs (q, k, v [b, T, P], g [b, T, H, D], beta [b, T, H]):
        `step(t, rows, pools)` runs position t for group rows `rows` (None: all), as `_decode` steps a token;
        the engine replays kept positions with it after a rejection."""
        weights, scale = self._conv_weights(), self.head_dim ** -0.5

        def step(t: int, rows, pools) -> torch.Tensor:
            rec, tails, index = pools
            at = (x[:, t:t + 1] if rows is None else x[rows, t:t + 1] for x in inputs)
            return kda_step(*at, weights, rec, tails, index, scale)

        return step

    def decode_weights(self, kernels):
        """This layer's weights as the native decode step reads them (`kernels.KdaWeights`), or None when
        they do not suit it as they are (layers/decode_weights.py)."""
        inputs = fused_matrix(kernels, self, self.input_names)
        f_b, o_proj = matrix(kernels, self, "f_b_proj"), matrix(kernels, self, "o_proj")
        floats = float_weights(self, ("A_log", "dt_bias", "o_norm", "q_conv1d", "k_conv1d", "v_conv1d"))
        if inputs is None or f_b is None or o_proj is None or floats is None or "g_proj" not in self._modules:
            return None
        a_log, dt_bias, o_norm, *conv = floats
        return kernels.KdaWeights(inputs=inputs[0], sizes=inputs[1], f_b=f_b, o_proj=o_proj, a_log=a_log,
                                  dt_bias=dt_bias, bounded=self.lower_bound is not None,
                                  lower_bound=self.lower_bound or 0.0, conv=[w[:, 0, :] for w in conv],
                                  o_norm=o_norm, eps=self.eps, scale=self.head_dim ** -0.5)

    def decode_state(self, kernels, batch: ForwardBatch, state: KDAStateView | None, like: torch.Tensor):
        """This step's state slots as the native step takes them (`kernels.KdaState`) when the batch is one
        group on `state` that the step runs in one call (batch.one_call_group: one token a sequence, or
        verify windows of one length); else None. Changes nothing: a window starts in `begin_step`.
        `like`: a row of the step (dtype, device)."""
        group = batch.one_call_group() if state is not None else None
        if group is None:
            return None
        rec, tails, index = state.slot_tensors(group.seqs, self._zero_state(like))
        if not all(t.is_contiguous() and t.dtype == torch.float32 for t in (rec, *tails)):
            return None
        replay = []
        if group.window:   # the step's inputs, written by the native step, for the rollback's replay
            b, T, H, D = len(group.seqs), group.tokens, self.num_heads, self.head_dim
            replay = [like.new_empty(shape) for shape in ((b, T, H * D),) * 3 + ((b, T, H, D), (b, T, H))]
        return kernels.KdaState(recurrent=rec, tails=list(tails), index=index, positions=group.tokens, replay=replay)

    def begin_step(self, batch: ForwardBatch, state: KDAStateView, native_state) -> None:
        """The native step of `decode_state`'s state is about to run: a verify window starts on the view,
        which keeps the slots' state and the step that replays kept positions from the inputs the native
        step writes to `native_state.replay`."""
        group = batch.one_call_group()
        if group.window:
            state.start_window(group.seqs, group.tokens, self._window_step(list(native_state.replay)),
                               self._zero_state(native_state.recurrent))

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: KDAStateView | None = None) -> torch.Tensor:
        """x [N, hidden] packed (already normalised) -> [N, hidden]; continues and updates `state`."""
        N = x.shape[0]
        H, D = self.num_heads, self.head_dim
        q, k, v, gate, f_a, b = self._project(x)
        g, beta = kda_gates(self.f_b_proj(f_a).view(N, H, D), b, self.A_log, self.dt_bias, self.lower_bound)
        o = torch.empty((N, H, D), dtype=g.dtype, device=x.device)
        for group in batch.groups(by_context=False):
            if group.window:
                group.put(o, self._window(group, q, k, v, g, beta, state))
                continue
            if group.tokens == 1:
                group.put(o, self._decode(group, q, k, v, g, beta, state))
                continue
            initial, tails = state.gather(group.seqs) if state is not None else (None, None)
            o_g, final, new_tails = self._core(*(group.take(t) for t in (q, k, v, g, beta)), tails, initial)
            group.put(o, o_g)
            if state is not None:
                state.scatter(group.seqs, final, new_tails)
        o = gated_rms_norm(o, gate.view(N, H, D), self.o_norm.weight, self.eps)
        return self.o_proj(o.reshape(N, H * D))

