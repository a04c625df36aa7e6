"""Stable LatentMoE (spec §4.6): fp32 sigmoid router with selection-only bias, routed experts in a
latent space (down-proj, experts, RMSNorm, up-proj), plus full-width shared experts.

Each expert runs once per step on all tokens routed to it (so a step's tokens read each expert they use
once: a verify window or a batch of decodes costs its distinct experts, not its tokens times k). Expert outputs (activation dtype) are
weighted by fp32 routing weights and summed in fp32 (the official precision contract).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from k3.config.model import K3Config
from k3.layers.basic import Linear, RMSNorm, frozen
from k3.layers.direct import Taken, bound, float_weights, fused_matrix, matrix
from k3.layers.fused import project
from k3.layers.experts import DenseExperts, PackedExperts
from k3.layers.mlp import GLUMLP
from k3.ops.dispatch import direct_kernels
from k3.ops.linear import linear
from k3.ops.mxfp4.expert import KEYS, moe_tokens
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
        args = self.direct_args(x) if kernels is not None else None
        return kernels.moe_decode_step(x, *args[1:]) if args is not None else None

    def direct_args(self, x: torch.Tensor) -> tuple | None:
        """("moe", the native MoE step's arguments after x) for decode rows x, or None where forward must
        run. Used by `_direct` and by the decoder layer's whole-layer step."""
        return bound(self, self.bind_args) if direct_kernels(x) is not None else None

    def bind_args(self, take: Taken) -> tuple | None:
        """direct_args' tuple, from the weights and settings `take` records (so a decoder layer can bind
        it with its own)."""
        step = self._bind_direct(take)
        if step is None:
            return None
        return step.args(take(self, "top_k"), take(self, "renormalize"), take(self, "scaling"))

    def _bind_direct(self, take: Taken) -> "MoEDecodeStep | None":
        experts, shared, norm = take(self, "experts"), take(self, "shared_experts"), take(self, "routed_expert_norm")
        if not isinstance(experts, PackedExperts) or shared is None or norm is None or not self.latent:
            return None
        inputs = fused_matrix(take, self, self.input_names)
        gate, up, down = matrix(take, self, "gate"), matrix(take, self, "routed_expert_up_proj"), matrix(take, shared, "down_proj")
        bias = float_weights(take, self.gate, ("e_score_correction_bias",))   # self.gate: taken by matrix()
        norm_w = float_weights(take, norm, ("weight",), (torch.bfloat16, torch.float32))
        bank = {k: take(experts, k) for k in KEYS}
        act = (experts.act, experts.beta, experts.linear_beta)
        if (inputs is None or gate is None or up is None or down is None or bias is None or norm_w is None
                or (shared.act, shared.beta, shared.linear_beta) != act):
            return None
        # What the packed-expert kernel's `supports` asks of a call, on decode rows (fp32, <= MAX_ROWS):
        z = torch.empty((1, bank["w1_packed"].shape[-1] * 2))
        if not moe_tokens.supports(z, bank, torch.zeros((1, 1), dtype=torch.long), torch.zeros((1, 1)),
                                   experts.group_size, *act):
            return None
        codes = (0 if act[0] == "situ" else 1, act[1], act[2] or 0.0)
        return MoEDecodeStep([*gate.pair, *inputs.matrix.pair, *up.pair, *down.pair], list(inputs.sizes), bias[0],
                             [bank[k] for k in KEYS], codes, norm_w[0], norm.eps)


@dataclass(frozen=True)
class MoEDecodeStep:
    """LatentMoE's decode step as one native call (ops/native/decode_steps.cpp), its weights bound
    (layers/direct.py)."""
    matrices: list[torch.Tensor]     # (weight, scale) of the router, input group, latent up, shared down
    sizes: list[int]                 # the input group's latent, shared gate, shared up widths
    bias: torch.Tensor
    bank: list[torch.Tensor]         # w1, w3, w2 codes and scales (KEYS order)
    act: tuple[int, float, float]    # activation code, beta, linear beta (0: none), as the kernels take them
    norm: torch.Tensor
    eps: float

    def args(self, top_k: int, renormalize: bool, scaling: float) -> tuple:
        """("moe", moe_decode_step's arguments after x)."""
        return ("moe", self.matrices, self.sizes, self.bias, top_k, renormalize, scaling, self.bank, *self.act,
                self.norm, self.eps)
