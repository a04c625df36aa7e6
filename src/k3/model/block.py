"""One decoder layer: KDA or MLA attention, dense or LatentMoE FFN, Block AttnRes or plain residuals.

With AttnRes (spec §4.2) the layer reads and extends the depth bank `bank` (a list of
[N, hidden] block sums, per forward pass, never across tokens) and returns the running partial
sum of its block; without it, the usual pre-norm residual stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from k3.config.model import LAYER_KDA, MLP_MOE, K3Config
from k3.layers.basic import RMSNorm, WeightOnly
from k3.layers.direct import Taken, bound, float_weights
from k3.layers.kda import KimiDeltaAttention
from k3.layers.mla import GatedMLA
from k3.layers.mlp import GLUMLP
from k3.layers.moe import LatentMoE
from k3.layers.batch import ForwardBatch
from k3.layers.state import KDAStateView, MLACacheView
from k3.ops.attnres import attn_res
from k3.ops.dispatch import direct_kernels


ROW_WEIGHT_DTYPES = (torch.bfloat16, torch.float32)  # what the native row kernels read


class DecoderLayer(nn.Module):
    def __init__(self, c: K3Config, index: int):
        super().__init__()
        self.index, self.eps = index, c.rms_norm_eps
        self.block_start = c.is_block_start(index)
        self.attn_res = c.attn_res_block_size is not None
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if self.attn_res:
            # Only the products norm ⊙ proj are used, as AttnRes pseudo-queries.
            self.self_attention_res_norm = WeightOnly(c.hidden_size)
            self.self_attention_res_proj = WeightOnly(1, c.hidden_size)
            self.mlp_res_norm = WeightOnly(c.hidden_size)
            self.mlp_res_proj = WeightOnly(1, c.hidden_size)
        self.self_attn = KimiDeltaAttention(c) if c.layer_types[index] == LAYER_KDA else GatedMLA(c)
        act = (c.hidden_act, c.situ_beta, c.situ_linear_beta)
        if c.mlp_types[index] == MLP_MOE:
            self.block_sparse_moe = LatentMoE(c)
        else:
            self.mlp = GLUMLP(c.hidden_size, c.intermediate_size, *act)

    def ffn(self, x: torch.Tensor) -> torch.Tensor:
        return self.block_sparse_moe(x) if hasattr(self, "block_sparse_moe") else self.mlp(x)

    def forward(self, h: torch.Tensor, bank: list[torch.Tensor], batch: ForwardBatch,
                state: KDAStateView | MLACacheView | None = None) -> torch.Tensor:
        """h [N, hidden] packed -> next layer's input [N, hidden]; may append to `bank`."""
        whole = self._direct(h, bank, batch, state)
        if whole is not None:
            return whole
        norm, mix_norm = self._row_ops(h)
        if not self.attn_res:
            h = h + self.self_attn(norm(self.input_layernorm, h), batch, state)
            return h + self.ffn(norm(self.post_attention_layernorm, h))
        partial = h
        x = (mix_norm(bank + [partial], self.self_attention_res_norm, self.self_attention_res_proj, self.input_layernorm)
             if bank else norm(self.input_layernorm, partial))
        if self.block_start:
            bank.append(partial)
            partial = None
        y = self.self_attn(x, batch, state)
        partial = y if partial is None else partial + y
        x = mix_norm(bank + [partial], self.mlp_res_norm, self.mlp_res_proj, self.post_attention_layernorm)
        return partial + self.ffn(x)

    def _direct(self, h: torch.Tensor, bank: list[torch.Tensor], batch: ForwardBatch, state) -> torch.Tensor | None:
        """A Block-AttnRes layer decoding every sequence's one token in one native call (layer_decode), in
        forward's order (so its bits), or None where forward runs."""
        args = self.decode_args(h, batch, state)
        if args is None:
            return None
        out = direct_kernels(h).layer_decode(h, bank, args)
        if self.block_start:
            bank.append(h)
        return out

    def decode_args(self, h: torch.Tensor, batch: ForwardBatch, state) -> tuple | None:
        """This layer's whole decode step as the native layer_decode takes it: (block start,
        row weights, epsilons, the attention's step, the FFN's step), or None where forward must run."""
        kernels = direct_kernels(h) if self.attn_res else None
        step = bound(self, self._bind_layer) if kernels is not None else None
        return self.step_args(step, h, batch, state) if step is not None else None

    def step_args(self, step: "LayerDecodeStep", x: torch.Tensor, batch: ForwardBatch, state) -> tuple | None:
        """decode_args for a step bound already (the whole-token step binds every layer's with its own):
        the attention's state added, or None where its step does not apply."""
        attn = self.self_attn.step_args(step.attn, x, batch, state)
        return (self.block_start, step.rows.weights, step.rows.eps, attn, step.ffn) if attn is not None else None

    def _bind_layer(self, take: Taken) -> "LayerDecodeStep | None":
        """The row weights, the attention's step and the FFN's arguments, all bound at once: one check a
        decode step for the layer instead of one per part (each reads its objects with its data evicted)."""
        rows = self._bind_rows(take)
        ffn_module = take(self, "block_sparse_moe")
        ffn_module = take(self, "mlp") if ffn_module is None else ffn_module
        ffn = ffn_module.bind_args(take) if rows is not None and ffn_module is not None else None
        attn = take(self, "self_attn")._bind_direct(take) if ffn is not None else None
        return LayerDecodeStep(rows, attn, ffn) if attn is not None else None

    def _row_ops(self, h: torch.Tensor):
        """(norm(module, x), mix_norm(candidates, mix norm, mix proj, norm module)): the sublayers' input
        norms, after an AttnRes mix for the second. On decode rows outside autograd the native kernels
        called directly (what the dispatch picks for them, so the same bits), else the modules."""
        kernels = direct_kernels(h)
        if kernels is None or not bound(self, self._bind_rows):
            return ((lambda module, x: module(x)),
                    (lambda cands, n, p, ln: ln(attn_res(cands, n.weight, p.weight, self.eps))))
        return ((lambda module, x: kernels.rms_norm_rows(x, module.weight, module.eps)),
                (lambda cands, n, p, ln: kernels.attn_res_norm_rows(cands, n.weight, p.weight, self.eps, ln.weight, ln.eps)))

    def _bind_rows(self, take: Taken) -> "RowWeights | None":
        """This layer's norm and AttnRes weights, when the native row kernels read them as they are."""
        names = ("input_layernorm", "post_attention_layernorm") + (
            ("self_attention_res_norm", "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj") if self.attn_res else ())
        weights = float_weights(take, self, names, ROW_WEIGHT_DTYPES)
        if weights is None:
            return None
        return RowWeights(weights, [self.input_layernorm.eps, self.post_attention_layernorm.eps, self.eps])


@dataclass(frozen=True)
class LayerDecodeStep:
    """A decoder layer's bound decode step: its row weights, its attention's step (state added per call,
    by the attention's step_args) and its FFN's arguments."""
    rows: "RowWeights"
    attn: object
    ffn: tuple


@dataclass(frozen=True)
class RowWeights:
    """A decoder layer's row-kernel weights, bound (layers/direct.py): input and post-attention norms,
    then (with AttnRes) the attention's and the MLP's mix norm and proj; their epsilons and AttnRes's."""
    weights: list[torch.Tensor]
    eps: list[float]
