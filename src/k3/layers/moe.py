"""Stable LatentMoE (spec §4.6): fp32 sigmoid router with selection-only bias, routed experts in a
latent space (down-proj, experts, RMSNorm, up-proj), plus full-width shared experts.

Each expert runs once per step on all tokens routed to it (so a step's tokens read each expert they use
once: a verify window or a batch of decodes costs its distinct experts, not its tokens times k). Expert outputs (activation dtype) are
weighted by fp32 routing weights and summed in fp32 (the official precision contract).
"""

from __future__ import annotations

import torch
from torch import nn

from k3.config.model import K3Config
from k3.layers.basic import Linear, RMSNorm, frozen
from k3.layers.decode_weights import Bound, activation, float_weights, fused_matrix, matrix
from k3.layers.fused import project
from k3.layers.experts import DenseExperts, PackedExperts
from k3.layers.mlp import GLUMLP
from k3.layers.step_examples import example_config, random_layer
from k3.layers.steps import ffn_native, ffn_supports
from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.linear import linear
from k3.ops.mxfp4.expert import KEYS, bank_takes
from k3.ops.precision import wide
from k3.ops.routing import sigmoid_topk_route


class MoEGate(nn.Module):
    def __init__(self, hidden: int, num_experts: int):
        super().__init__()
        self.weight = frozen(num_experts, hidden)
        self.e_score_correction_bias = frozen(num_experts, dtype=torch.float32)


class LatentMoE(nn.Module):
    def __init__(self, c: K3Config):
        super().__init__()
        h, r = c.hidden_size, c.routed_expert_hidden_size
        self.top_k, self.renormalize, self.scaling = c.num_experts_per_token, c.moe_renormalize, c.routed_scaling_factor
        self.gate = MoEGate(h, c.num_experts)
        if r is not None:
            self.routed_expert_down_proj = Linear(h, r)
            self.routed_expert_norm = RMSNorm(r, c.rms_norm_eps) if c.latent_moe_use_norm else None
            self.routed_expert_up_proj = Linear(r, h)
        act = (c.hidden_act, c.situ_beta, c.situ_linear_beta)
        if c.expert_format == "mxfp4":
            self.experts = PackedExperts(c.num_experts, c.expert_in_dim, c.moe_intermediate_size,
                                         c.mxfp4_group_size, *act)
        else:
            self.experts = DenseExperts(c.num_experts, c.expert_in_dim, c.moe_intermediate_size, *act)
        self.shared_experts = (GLUMLP(h, c.moe_intermediate_size * c.num_shared_experts, *act)
                               if c.num_shared_experts else None)
        # What reads the layer input besides the router: the latent down-projection, the shared gate/up.
        self.input_names = ((("routed_expert_down_proj",) if r is not None else ())
                            + (("shared_experts.gate_proj", "shared_experts.up_proj") if c.num_shared_experts else ()))
        self.fused: dict = {}     # the loader's SharedInput groups (layers/fused.py)
        self.bound = Bound()      # the native step's weights (steps.step_weights)

    @property
    def latent(self) -> bool:
        return hasattr(self, "routed_expert_down_proj")

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, hidden] -> (weights [N, k] fp32, ids [N, k])."""
        xw = wide(x)
        logits = linear(xw, self.gate.weight)
        weights, ids = sigmoid_topk_route(logits, self.gate.e_score_correction_bias, self.top_k, self.renormalize,
                                          self.scaling)
        if self.training:
            # Tokens per expert, for bias-based (auxiliary-loss-free) load balancing by the trainer.
            self.last_load = torch.bincount(ids.flatten(), minlength=self.gate.weight.shape[0]).detach()
        return weights, ids

    def _routed(self, z: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """z [N, d] -> sum_e w_e E_e(z) [N, d], accumulated in fp32, returned in z.dtype."""
        acc = torch.zeros(z.shape, dtype=torch.promote_types(z.dtype, torch.float32), device=z.device)
        # decode: no gather/scatter, same sums in the same (ascending expert) order. Not while compiling:
        # the expert ids are data a trace cannot read, and the tensor form gives the same bits.
        if z.shape[0] == 1 and not torch.compiler.is_compiling():
            order = sorted(zip(ids[0].tolist(), weights[0].tolist()))
            return self.experts.weighted_sum(z, [e for e, _ in order], [w for _, w in order], acc).to(z.dtype)
        return self.experts.routed_sum(z, weights, ids).to(z.dtype)

    def shared_inputs(self) -> list[tuple[str, ...]]:
        """The latent down-projection and the shared expert's gate/up read the same input: one matrix
        (see layers/fused.py)."""
        return [self.input_names] if len(self.input_names) > 1 else []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., hidden] (already normalised) -> [..., hidden]. Rows the native step takes run it in one
        call (layers/steps.py); the rest run `forward_ops`."""
        rows = x.reshape(-1, x.shape[-1])
        if moe_layer_step.use_native(self, rows):
            return moe_layer_step.native(self, rows).reshape(x.shape)
        return self.forward_ops(x)

    def forward_ops(self, x: torch.Tensor) -> torch.Tensor:
        """The layer op by op: its modules and the registry's ops (the native step's reference)."""
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, ids = self.route(x)
        parts = project(self, self.input_names, x)
        z = parts[0] if self.latent else x
        y = self._routed(z, weights, ids)
        if self.latent:
            if self.routed_expert_norm is not None:
                y = self.routed_expert_norm(y)
            y = self.routed_expert_up_proj(y)
        if self.shared_experts is not None:
            y = y + self.shared_experts.down(*parts[-2:])
        return y.reshape(shape)

    def decode_weights(self, kernels):
        """This layer's weights as the native decode step reads them (`kernels.MoeWeights`), or None when
        they do not suit it (streamed experts, no shared expert or latent norm, weights as they are not)."""
        experts, shared, norm = self.experts, self.shared_experts, getattr(self, "routed_expert_norm", None)
        if not isinstance(experts, PackedExperts) or shared is None or norm is None or not self.latent:
            return None
        inputs = fused_matrix(kernels, self, self.input_names)
        router, up, down = matrix(kernels, self, "gate"), matrix(kernels, self, "routed_expert_up_proj"), matrix(kernels, shared, "down_proj")
        bias = float_weights(self.gate, ("e_score_correction_bias",))
        norm_w = float_weights(norm, ("weight",), (torch.bfloat16, torch.float32))
        bank = {k: getattr(experts, k) for k in KEYS}
        spec = (experts.act, experts.beta, experts.linear_beta)
        act = activation(kernels, *spec)
        if (inputs is None or router is None or up is None or down is None or bias is None or norm_w is None
                or act is None or (shared.act, shared.beta, shared.linear_beta) != spec):
            return None
        if not bank_takes(bank, experts.group_size, experts.act):
            return None
        return kernels.MoeWeights(router=router, bias=bias[0], top_k=self.top_k, renormalise=self.renormalize,
                                  scaling=self.scaling, inputs=inputs[0], sizes=inputs[1], up=up, shared_down=down,
                                  bank=[bank[k] for k in KEYS], act=act,
                                  norm=kernels.NormWeights(weight=norm_w[0], eps=norm.eps))


def _step_examples(large: bool) -> list[Example]:
    c = example_config(large)
    layer = random_layer(LatentMoE(c), seed=51)
    return [Example(f"{n} rows, {c.num_experts} experts, top {c.num_experts_per_token}",
                    (layer, randn(n, c.hidden_size, seed=52 + n))) for n in (1, 5)]


moe_layer_step = register("moe_layer_step", examples=_step_examples, reference=lambda layer, x: layer.forward_ops(x),
                          native=ffn_native, supports=ffn_supports)
