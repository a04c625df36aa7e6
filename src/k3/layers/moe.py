"""Stable LatentMoE (spec section 4.6): fp32 sigmoid router with selection-only bias, routed experts in a
latent space (down-proj, experts, RMSNorm, up-proj), plus full-width shared experts.

Each expert runs once per step on all tokens routed to it (so a step's tokens read each expert they use
once: a verify window or a batch of decodes costs its distinct experts, not its tokens times k). Expert outputs (activation dtype) are
weighted by fp32 routing weights and summed in fp32 (the official precision contract).
"""

from __future__ import annotations

import torch
from torch import nn

from k3.config.model import K3Config
from k3.layers.basic import Linear, RMSNorm, direct_linear, direct_ready, frozen
from k3.layers.fused import direct_group, project
from k3.layers.experts import DenseExperts, PackedExperts
from k3.layers.mlp import GLUMLP
from k3.ops.activation import glu
from k3.ops.dispatch import direct_kernels
from k3.ops.linear import linear
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
        if z.shape[0] == 1:  # decode: no gather/scatter, same sums in the same (ascending expert) order
            order = sorted(zip(ids[0].tolist(), weights[0].tolist()))
            return self.experts.weighted_sum(z, [e for e, _ in order], [w for _, w in order], acc).to(z.dtype)
        return self.experts.routed_sum(z, weights, ids).to(z.dtype)

    def shared_inputs(self) -> list[tuple[str, ...]]:
        """The latent down-projection and the shared expert's gate/up read the same input: one matrix
        (see layers/fused.py)."""
        return [self.input_names] if len(self.input_names) > 1 else []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., hidden] (already normalised) -> [..., hidden]."""
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        direct = self._direct(x)
        if direct is not None:
            return direct.reshape(shape)
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

    def _direct(self, x: torch.Tensor) -> torch.Tensor | None:
        """Decode rows: forward's native kernels called in forward's order (so its bits) without the
        per-op dispatch -> [N, hidden], or None where forward must run (see dispatch.direct_kernels)."""
        kernels = direct_kernels(x)
        group = direct_group(self, self.input_names) if kernels is not None else None
        shared = self.shared_experts
        if (group is None or not self.latent or self.routed_expert_norm is None or shared is None
                or not isinstance(self.experts, PackedExperts)
                or not all(direct_ready(lin) for lin in (self.gate, self.routed_expert_up_proj, shared.down_proj))
                or self.gate.e_score_correction_bias.dtype != torch.float32
                or self.routed_expert_norm.weight.dtype not in (torch.bfloat16, torch.float32)):
            return None
        logits = direct_linear(kernels, x, self.gate)
        weights, ids = kernels.moe_route_rows(logits, self.gate.e_score_correction_bias, self.top_k, self.renormalize,
                                              self.scaling)
        z, gate, up = group.direct(kernels, x)
        y = self.experts.direct_sum(z, weights, ids)
        if y is None:
            return None
        y = kernels.rms_norm_rows(y, self.routed_expert_norm.weight, self.routed_expert_norm.eps)
        y = direct_linear(kernels, y, self.routed_expert_up_proj)
        return y + direct_linear(kernels, glu(gate, up, shared.act, shared.beta, shared.linear_beta), shared.down_proj)
