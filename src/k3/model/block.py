"""One decoder layer: KDA or MLA attention, dense or LatentMoE FFN, Block AttnRes or plain residuals.

The layer's order is its steps in the model's plan (model/plan.py): with AttnRes (spec §4.2) it reads
and extends the depth bank `bank` (a list of [N, hidden] block sums, per forward pass, never across
tokens) and returns the running partial sum of its block; without it, the usual pre-norm residual stream.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.config.model import LAYER_KDA, MLP_MOE, K3Config
from k3.layers.basic import RMSNorm, WeightOnly
from k3.layers.batch import ForwardBatch
from k3.layers.kda import KimiDeltaAttention
from k3.layers.mla import GatedMLA
from k3.layers.mlp import GLUMLP
from k3.layers.moe import LatentMoE
from k3.layers.state import KDAStateView, MLACacheView
from k3.model.plan import Registers, layer_steps, run_steps


class DecoderLayer(nn.Module):
    def __init__(self, c: K3Config, index: int):
        super().__init__()
        self.index = index
        self.steps = layer_steps(c, index)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if c.attn_res_block_size is not None:
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
        self.store = None   # a streamed layer's TrunkStore: its bytes are read before the layer runs (model/streaming.py)

    @property
    def ffn_module(self) -> LatentMoE | GLUMLP:
        return self._modules["block_sparse_moe"] if "block_sparse_moe" in self._modules else self._modules["mlp"]

    def forward(self, h: torch.Tensor, bank: list[torch.Tensor], batch: ForwardBatch,
                state: KDAStateView | MLACacheView | None = None, step_states: tuple = ()) -> torch.Tensor:
        """h [N, hidden] packed -> next layer's input [N, hidden]; may append to `bank`. `state`: where
        prefill segments continue; `step_states`: the decode rows' (layers/step_state.py)."""
        if self.store is not None:
            self.store.ready(self.index)
        regs = Registers(h, bank)
        run_steps(self.steps, self, regs, batch, state, step_states)
        if self.store is not None:
            self.store.done(self.index)
        return regs.h
