"""A weightless model that "generates" a fixed token script, for testing engines, servers and parsers
against known output (e.g. an exact tool-call message) without training a model to produce it."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from k3.layers.state import StateLayout


class ScriptedModel(nn.Module):
    """Each sampled step emits the next token of `script` (shared by all requests, in order)."""

    def __init__(self, script: list[int], vocab_size: int, eos_token_id: int):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1), requires_grad=False)
        self.config = SimpleNamespace(vocab_size=vocab_size, eos_token_id=eos_token_id, num_hidden_layers=0,
                                      max_position_embeddings=1 << 20)
        self.compute_dtype = torch.float32
        self.script, self.step = list(script), 0

    def state_layout(self) -> StateLayout:
        return StateLayout((), 1, 1, 1, 1, 1, (), 1, 1)

    def forward_batch(self, ids, batch, views, logits_index, step_states=None):
        out = torch.full((len(logits_index), self.config.vocab_size), -1e9)
        for row in range(len(logits_index)):
            out[row, self.script[self.step % len(self.script)]] = 0.0
            self.step += 1
        return out
