"""KimiDeltaAttention layer (spec §4.3): projections, short convs, gates, delta-rule core, gated norm.

Prefill of more than `CHUNK_MIN_TOKENS` tokens runs the chunked core; shorter segments run the
recurrence, both through the state protocol (layers/state.py). Decode rows (one new token per sequence)
run the whole group in one step on the state slots in place; a verify window (speculative decoding) runs
that same step once per position (all positions in one call) and keeps its inputs for the runner's
rollback (`window_step`). Their state tensors come from the runner (layers/step_state.py);
`kda_layer_step` (layers/steps.py) does either in one native call.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.config.model import K3Config
from k3.layers.basic import Linear, WeightOnly, frozen
from k3.layers.decode_weights import Bound, float_weights, fused_matrix, matrix
from k3.layers.state import KDAStateView
from k3.layers.step_state import KdaStep, WindowStep, check_step_states, kda_replay
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

    def _step(self, group, q, k, v, g, beta, step: KdaStep | None) -> torch.Tensor:
        """Decode rows of one group on `step`'s slots in place (zero state for the group when there is none):
        one new token per sequence, or verify windows whose position t is stepped exactly as decoding it
        alone would step it; a window's inputs also go to `step.replay` -> o [b, T, H, D]."""
        inputs = [group.take(t) for t in (q, k, v, g, beta)]
        if step is None:
            recurrent, tails = self._zero_state(q)(len(group.seqs))
            step = KdaStep(recurrent, tails, torch.arange(len(group.seqs), device=q.device), group.tokens)
        for kept, x in zip(step.replay, inputs):
            kept.copy_(x)
        core = kda_window if group.window else kda_step
        return core(*inputs, self._conv_weights(), step.recurrent, step.tails, step.index, self.head_dim ** -0.5)

    def window_step(self, replay: tuple[torch.Tensor, ...]) -> WindowStep:
        """The step that replays kept positions of a verify window from the inputs it wrote to `replay`
        (`KdaStep.replay`): `step(t, rows, pools)` runs position t for group rows `rows` (None: all), as
        decoding it alone would; the engine's rollback calls it (engine/speculative/rollback.py)."""
        weights, scale = self._conv_weights(), self.head_dim ** -0.5

        def step(t: int, rows, pools) -> torch.Tensor:
            rec, tails, index = pools
            at = (x[:, t:t + 1] if rows is None else x[rows, t:t + 1] for x in replay)
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

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: KDAStateView | None = None,
                step_states: tuple[KdaStep, ...] = ()) -> torch.Tensor:
        """x [N, hidden] packed (already normalised) -> [N, hidden]. Prefill segments continue and update
        `state`; decode rows run on `step_states`, one per `batch.step_groups()` (layers/step_state.py). A batch
        that is one group the native step takes runs it in one call (layers/steps.py); else `forward_ops`."""
        if batch.one_call_group() is not None and step_states and kda_layer_step.use_native(self, x, step_states[0]):
            return kda_layer_step.native(self, x, step_states[0])
        return self.forward_ops(x, batch, state, step_states)

    def forward_ops(self, x: torch.Tensor, batch: ForwardBatch, state: KDAStateView | None = None,
                    step_states: tuple[KdaStep, ...] = ()) -> torch.Tensor:
        """The layer op by op: its modules and the registry's ops (the native step's reference)."""
        N = x.shape[0]
        H, D = self.num_heads, self.head_dim
        q, k, v, gate, f_a, b = self._project(x)
        g, beta = kda_gates(self.f_b_proj(f_a).view(N, H, D), b, self.A_log, self.dt_bias, self.lower_bound)
        o = torch.empty((N, H, D), dtype=g.dtype, device=x.device)
        check_step_states(batch, state, step_states)
        decoding = dict(zip(map(id, batch.step_groups()), step_states))
        for group in batch.groups(by_context=False):
            if group.window or group.tokens == 1:
                group.put(o, self._step(group, q, k, v, g, beta, decoding.get(id(group))))
                continue
            initial, tails = state.gather(group.seqs) if state is not None else (None, None)
            o_g, final, new_tails = self._core(*(group.take(t) for t in (q, k, v, g, beta)), tails, initial)
            group.put(o, o_g)
            if state is not None:
                state.scatter(group.seqs, final, new_tails)
        o = gated_rms_norm(o, gate.view(N, H, D), self.o_norm.weight, self.eps)
        return self.o_proj(o.reshape(N, H * D))


def _step_reference(layer: KimiDeltaAttention, x, step: KdaStep) -> torch.Tensor:
    return layer.forward_ops(x, rows_batch(step.index.numel(), step.positions), step_states=(step,))


def _step_examples(large: bool) -> list[Example]:
    """Decode rows (1 and 3 sequences) and verify windows of 3 (with their replay inputs), on slots of a pool."""
    c = example_config(large)
    layer = random_layer(KimiDeltaAttention(c), seed=21)
    H, D, P, tail, slots = c.kda_num_heads, c.kda_head_dim, c.kda_proj_dim, c.short_conv_kernel_size - 1, 5
    out = []
    for n, T in ((1, 1), (3, 1), (2, 3)):
        tails = tuple(randn(slots, tail, P, seed=30 + i) for i in range(3))
        replay = tuple(t.zero_() for t in kda_replay(n, T, H, D, tails[0])) if T > 1 else ()
        step = KdaStep(randn(slots, H, D, D, seed=23, scale=0.3), tails, torch.tensor([slots - 1, 0, 2][:n]), T, replay)
        out.append(Example(f"{n} sequences x {T} positions, hidden {c.hidden_size}",
                           (layer, randn(n * T, c.hidden_size, seed=22), step)))
    return out


kda_layer_step = register("kda_layer_step", examples=_step_examples, reference=_step_reference,
                          native=attention_native, supports=attention_supports)
