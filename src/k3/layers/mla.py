"""Gated NoPE MLA layer (spec §4.4). Caches only the normalised latent c_kv and the shared k_x.

Decode (one new token per sequence) attends in the latent space (absorbed): with a cache, every
decoding sequence of the step in one call over the paged cache read in place, whatever its length.
Verify windows (speculative decoding) take the same path with one query row per window position, so
each position is computed exactly as decoding it alone would (the decode plan's native step too).
Longer segments (prefill) expand K/V once and run SDPA, one call per group of equal cached length.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.config.model import K3Config
from k3.layers.basic import Linear, RMSNorm
from k3.layers.decode_weights import Bound, float_weights, fused_matrix, matrix
from k3.layers.batch import ForwardBatch
from k3.layers.fused import project
from k3.layers.state import MLACacheView
from k3.layers.step_state import MlaStep, check_step_states
from k3.layers.step_examples import example_config, random_layer
from k3.layers.steps import attention_native, attention_supports, rows_batch
from k3.ops.dispatch import register
from k3.ops.elementwise import sigmoid
from k3.ops.harness import Example, randn
from k3.ops.linear import head_linear
from k3.ops.mla import mla_absorbed, mla_sdpa, paged_decode
from k3.ops.mla.paged import write_rows


class GatedMLA(nn.Module):
    def __init__(self, c: K3Config):
        super().__init__()
        h, H = c.hidden_size, c.num_attention_heads
        self.num_heads, self.nope, self.extra, self.v_dim = H, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        self.kv_rank = c.kv_lora_rank
        self.scale = c.qk_head_dim ** -0.5
        if c.q_lora_rank:
            self.q_a_proj = Linear(h, c.q_lora_rank)
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, c.mla_norm_eps)
            self.q_b_proj = Linear(c.q_lora_rank, H * c.qk_head_dim)
        else:
            self.q_proj = Linear(h, H * c.qk_head_dim)
        self.kv_a_proj_with_mqa = Linear(h, c.kv_lora_rank + c.qk_rope_head_dim)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, c.mla_norm_eps)
        self.kv_b_proj = Linear(c.kv_lora_rank, H * (c.qk_nope_head_dim + c.v_head_dim))
        if c.mla_use_output_gate:
            self.g_proj = Linear(h, H * c.v_head_dim)
        self.o_proj = Linear(H * c.v_head_dim, h)
        self.input_names = (("q_a_proj" if c.q_lora_rank else "q_proj", "kv_a_proj_with_mqa")
                            + (("g_proj",) if c.mla_use_output_gate else ()))
        self.fused: dict = {}     # the loader's SharedInput groups (layers/fused.py)
        self.bound = Bound()      # the native step's weights (steps.step_weights)

    def shared_inputs(self) -> list[tuple[str, ...]]:
        """The projections of the layer input, as one matrix (see layers/fused.py)."""
        return [self.input_names]

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """x [N, hidden] -> q [N, H * (Dn + Dr)], kv_a [N, R + Dr], output gate [N, H * v] (or None)."""
        q, kv_a, *gate = project(self, self.input_names, x)
        if not hasattr(self, "q_proj"):
            q = self.q_b_proj(self.q_a_layernorm(q))
        return q, kv_a, gate[0] if gate else None

    def _paged(self, q: torch.Tensor, paged, w_uk: torch.Tensor, w_uv: torch.Tensor) -> torch.Tensor:
        """q [n, H, Dn + Dr], one query row per position, over paged latents -> o [n, H, v] (absorbed)."""
        q_lat = torch.cat((head_linear(q[..., :self.nope], w_uk, transpose=True), q[..., self.nope:]), dim=-1)
        return head_linear(paged_decode(q_lat, paged, self.scale), w_uv)

    def decode_weights(self, kernels):
        """This layer's weights as the native decode step reads them (`kernels.MlaWeights`), or None when
        they do not suit it as they are (layers/decode_weights.py)."""
        inputs = fused_matrix(kernels, self, self.input_names)
        q_b, o_proj = matrix(kernels, self, "q_b_proj"), matrix(kernels, self, "o_proj")
        norms = float_weights(self, ("q_a_layernorm", "kv_a_layernorm"), (torch.bfloat16, torch.float32))
        w_kv = float_weights(self, ("kv_b_proj",), (torch.bfloat16,))
        if inputs is None or q_b is None or o_proj is None or norms is None or w_kv is None or "g_proj" not in self._modules:
            return None
        w_kv = w_kv[0].view(self.num_heads, self.nope + self.v_dim, self.kv_rank)
        q_a, kv_a = (kernels.NormWeights(weight=w, eps=m.eps) for w, m in zip(norms, (self.q_a_layernorm, self.kv_a_layernorm)))
        return kernels.MlaWeights(inputs=inputs[0], sizes=inputs[1], q_b=q_b, o_proj=o_proj, q_a_norm=q_a, kv_a_norm=kv_a,
                                  w_uk=w_kv[:, :self.nope], w_uv=w_kv[:, self.nope:], scale=self.scale)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, cache: MLACacheView | None = None,
                step_states: tuple[MlaStep, ...] = ()) -> torch.Tensor:
        """x [N, hidden] packed (already normalised) -> [N, hidden]. Prefill segments extend `cache`; decode
        rows write their latents and attend on `step_states`, one per `batch.step_groups()` (layers/step_state.py).
        A batch that is one group the native step takes runs it in one call (layers/steps.py); else
        `forward_ops`."""
        if batch.one_call_group() is not None and step_states and mla_layer_step.use_native(self, x, step_states[0]):
            return mla_layer_step.native(self, x, step_states[0])
        return self.forward_ops(x, batch, cache, step_states)

    def forward_ops(self, x: torch.Tensor, batch: ForwardBatch, cache: MLACacheView | None = None,
                    step_states: tuple[MlaStep, ...] = ()) -> torch.Tensor:
        """The layer op by op: its modules and the registry's ops (the native step's reference)."""
        N = x.shape[0]
        H = self.num_heads
        q, kv_a, gate = self._project(x)
        q = q.view(N, H, self.nope + self.extra)
        c_kv = self.kv_a_layernorm(kv_a[..., :self.kv_rank])
        k_x = kv_a[..., self.kv_rank:]
        w_kv = self.kv_b_proj.weight.view(H, self.nope + self.v_dim, self.kv_rank)
        w_uk, w_uv = w_kv[:, :self.nope], w_kv[:, self.nope:]
        o = torch.empty((N, H, self.v_dim), dtype=x.dtype, device=x.device)
        check_step_states(batch, cache, step_states)
        for group, step in zip(batch.step_groups(), step_states):   # one query row per new position
            b, T = len(group.seqs), group.tokens
            write_rows(step.pool, step.new_rows, group.take(c_kv), group.take(k_x))
            q_g = group.take(q).reshape(b * T, H, self.nope + self.extra)
            group.put(o, self._paged(q_g, step.paged(self.kv_rank), w_uk, w_uv).view(b, T, H, self.v_dim))
        for group in batch.prefill_groups() if step_states or cache is not None else batch.groups(by_context=True):
            c_all, kx_all, offset = group.take(c_kv), group.take(k_x), 0
            if cache is not None:
                c_all, kx_all, offset = cache.extend(group.seqs, c_all, kx_all)
            # Without a cache a single token attends in the latent space; a longer segment expands K/V once.
            core = mla_absorbed if group.tokens == 1 else mla_sdpa
            q_g = group.take(q)
            group.put(o, core(q_g[..., :self.nope], q_g[..., self.nope:], c_all, kx_all, w_uk, w_uv, self.scale, offset))
        o = o.reshape(N, H * self.v_dim)
        if gate is not None:
            o = o * sigmoid(gate)
        return self.o_proj(o)



def _step_reference(layer: GatedMLA, x, step: MlaStep) -> torch.Tensor:
    return layer.forward_ops(x, rows_batch(x.shape[0] // step.positions, step.positions), step_states=(step,))


def _step_examples(large: bool) -> list[Example]:
    """Sequences with different cached lengths on a paged pool (blocks of 4, in scattered order): decode rows
    of 1 and 3 sequences, and verify windows of 3 for 2."""
    c = example_config(large)
    layer = random_layer(GatedMLA(c), seed=41)
    width, block, blocks = c.kv_lora_rank + c.qk_rope_head_dim, 4, 12
    out = []
    for held, T in (((5,), 1), ((2, 9, 6), 1), ((3, 7), 3)):
        tables, lens, new_rows, next_block = [], [], [], blocks - 1
        for s, n in enumerate(held):
            mine = [next_block - j for j in range(-(-(n + T) // block))]   # blocks from the end: scattered
            next_block -= len(mine)
            for t in range(T):                      # one query row per position, attending up to it
                tables.append(mine + [0] * (4 - len(mine)))
                lens.append(n + t + 1)
                new_rows.append(mine[(n + t) // block] * block + (n + t) % block)
        step = MlaStep(randn(blocks * block, width, seed=43), torch.tensor(tables, dtype=torch.int32),
                       torch.tensor(lens, dtype=torch.int32), block, torch.tensor(new_rows), T)
        out.append(Example(f"{len(held)} sequences x {T} positions, cached {held}",
                           (layer, randn(len(lens), c.hidden_size, seed=42), step)))
    return out


mla_layer_step = register("mla_layer_step", examples=_step_examples, reference=_step_reference,
                          native=attention_native, supports=attention_supports)
