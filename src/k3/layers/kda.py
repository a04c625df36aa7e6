"""KimiDeltaAttention layer (spec §4.3): projections, short convs, gates, delta-rule core, gated norm.

Prefill of more than `CHUNK_MIN_TOKENS` tokens runs the chunked core; shorter segments run the
recurrence. Decode (one new token per sequence) runs the whole batch in one step on the state slots
in place; a verify window (speculative decoding) runs that same step once per position (all positions
in one call), and hands the step to its state view so the engine can replay a kept prefix after a
rejection. `kda_layer_step` (layers/steps.py) does both in one native call (`step_args`, `begin_step`). All
continue from and update the sequences' state when one is given.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.config.model import K3Config
from k3.layers.basic import Linear, WeightOnly, frozen
from k3.layers.decode_weights import Bound, float_weights, fused_matrix, matrix
from k3.layers.state import KDAStateView, SlotTensors
from k3.layers.step_examples import example_config, random_layer
from k3.layers.steps import attention_native, attention_supports, rows_batch
from k3.layers.batch import ForwardBatch
from k3.layers.fused import project
from k3.ops.conv import short_conv_silu
from k3.ops.kda import chunk_kda, kda_gates, kda_step, kda_window, recurrent_kda
from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
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
        self.fused: dict = {}     # the loader's SharedInput groups (layers/fused.py)
        self.bound = Bound()      # the native step's weights (steps.step_weights)

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

    def step_args(self, batch: ForwardBatch, state: KDAStateView | None, like: torch.Tensor):
        """The state tensors of `kda_layer_step` (recurrent pool, tail pools, slot index, replay) when the batch
        is one group on `state` that the step runs in one call (batch.one_call_group: one token a sequence,
        or verify windows of one length); else None. Changes nothing: a window starts in `begin_step`.
        `like`: a row of the step (dtype, device)."""
        group = batch.one_call_group() if state is not None else None
        if group is None:
            return None
        rec, tails, index = state.slot_tensors(group.seqs, self._zero_state(like))
        replay = ()
        if group.window:   # the step's inputs, written by the native step, for the rollback's replay
            b, T, H, D = len(group.seqs), group.tokens, self.num_heads, self.head_dim
            replay = tuple(like.new_empty(shape) for shape in ((b, T, H * D),) * 3 + ((b, T, H, D), (b, T, H)))
        return rec, tuple(tails), index, replay

    def state_takes(self, recurrent, tails, index, replay) -> bool:
        """Whether the native step reads `step_args`' tensors as they are."""
        return index.dtype == torch.long and all(t.is_contiguous() and t.dtype == torch.float32 for t in (recurrent, *tails))

    def step_state(self, kernels, rows: int, recurrent, tails, index, replay):
        """`step_args`' tensors as the native step's `kernels.KdaState`, for `rows` rows of input."""
        return kernels.KdaState(recurrent=recurrent, tails=list(tails), index=index, positions=rows // index.numel(),
                                replay=list(replay))

    def begin_step(self, batch: ForwardBatch, state: KDAStateView, args: tuple) -> None:
        """The native step on `step_args`' tensors is about to run: a verify window starts on the view, which
        keeps the slots' state and the step that replays kept positions from the inputs the native step
        writes to the replay tensors."""
        group = batch.one_call_group()
        recurrent, _, _, replay = args
        if group.window:
            state.start_window(group.seqs, group.tokens, self._window_step(list(replay)), self._zero_state(recurrent))

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: KDAStateView | None = None) -> torch.Tensor:
        """x [N, hidden] packed (already normalised) -> [N, hidden]; continues and updates `state`. Decode rows
        the native step takes run it in one call (layers/steps.py); the rest run `forward_ops`."""
        args = self.step_args(batch, state, x)
        if args is not None and kda_layer_step.use_native(self, x, *args):
            self.begin_step(batch, state, args)
            return kda_layer_step.native(self, x, *args)
        return self.forward_ops(x, batch, state)

    def forward_ops(self, x: torch.Tensor, batch: ForwardBatch, state: KDAStateView | None = None) -> torch.Tensor:
        """The layer op by op: its modules and the registry's ops (the native step's reference)."""
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



def _step_reference(layer: KimiDeltaAttention, x, recurrent, tails, index, replay) -> torch.Tensor:
    return layer.forward_ops(x, rows_batch(index.numel(), x.shape[0] // index.numel()), SlotTensors(recurrent, tails, index))


def _step_examples(large: bool) -> list[Example]:
    """Decode rows (1 and 3 sequences) and verify windows of 3, on slots of a pool."""
    c = example_config(large)
    layer = random_layer(KimiDeltaAttention(c), seed=21)
    H, D, P, tail, slots = c.kda_num_heads, c.kda_head_dim, c.kda_proj_dim, c.short_conv_kernel_size - 1, 5
    out = []
    for n, T in ((1, 1), (3, 1), (2, 3)):
        tails = tuple(randn(slots, tail, P, seed=30 + i) for i in range(3))
        args = (layer, randn(n * T, c.hidden_size, seed=22), randn(slots, H, D, D, seed=23, scale=0.3), tails,
                torch.tensor([slots - 1, 0, 2][:n]), ())
        out.append(Example(f"{n} sequences x {T} positions, hidden {c.hidden_size}", args))
    return out


kda_layer_step = register("kda_layer_step", examples=_step_examples, reference=_step_reference,
                          native=attention_native, supports=attention_supports)
