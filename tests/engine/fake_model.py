"""A weightless model for engine tests: its next token is a known function of everything the engine
cached for the sequence, read back through the same state views a real model uses.

MLA view: each token id is stored in c_kv[..., 0]; the whole history is read back on every step.
KDA view: recurrent[..., 0, 0, 0] counts tokens seen and [..., 0, 0, 1] sums their ids.
next = (sum(history) + 3 * count) % (vocab - 1). A sequence whose history contains POISON (the last id,
never generated), or whose KDA sum disagrees with its MLA history (state of another prefix), gets NaN logits.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from k3.layers.state import StateSpec

VOCAB = 50
POISON = VOCAB - 1


def expected_next(history: list[int]) -> int:
    return (sum(history) + 3 * len(history)) % (VOCAB - 1)


def reference(prompt: list[int], n: int) -> list[int]:
    """The n tokens a correct engine generates greedily after `prompt`."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(expected_next(seq))
    return seq[len(prompt):]


def fake_engine(**kw):
    from k3.engine import LLMEngine

    kw.setdefault("cache_memory", 1 << 20)
    return LLMEngine(FakeModel(), **kw)


class FakeModel(nn.Module):
    def __init__(self, eos_token_id: int | None = 48):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1), requires_grad=False)
        self.config = SimpleNamespace(vocab_size=VOCAB, eos_token_id=eos_token_id, num_hidden_layers=2,
                                      max_position_embeddings=1 << 20)
        self.compute_dtype = torch.float64
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def state_spec(self) -> StateSpec:
        return StateSpec(kda_layers=(0,), kda_heads=1, kda_key_dim=2, kda_value_dim=2, conv_tail=1,
                         kda_channels=2, mla_layers=(1,), mla_rank=3, mla_extra=1)

    def forward_batch(self, input_ids, batch, views, logits_index):
        self.calls.append((batch.seq_lens, batch.context_lens))
        kda, mla = views
        out = torch.zeros(batch.num_seqs, VOCAB, dtype=torch.float64)
        for group in batch.groups(by_context=True):
            seqs, idx = group.seqs, group.index
            ids = input_ids[idx].to(torch.float64)                      # [b, T]
            b, T = ids.shape
            c = torch.zeros(b, T, 3, dtype=torch.float64)
            c[..., 0] = ids
            c_all, _, _ = mla.extend(seqs, c, torch.zeros(b, T, 1, dtype=torch.float64))
            rec, tails = kda.gather(seqs)
            rec = rec.clone()
            rec[:, 0, 0, 0] += T
            rec[:, 0, 0, 1] += ids.sum(1)
            kda.scatter(seqs, rec, tails)
            history = c_all[..., 0]
            nxt = (history.sum(1) + 3 * rec[:, 0, 0, 0]).long() % (VOCAB - 1)
            for row, s in enumerate(seqs):
                out[s, nxt[row]] = 10.0
                if bool((history[row] == POISON).any()) or history[row].sum() != rec[row, 0, 0, 1]:
                    out[s] = float("nan")
        return out[_rows(batch, logits_index)]


def _rows(batch, logits_index) -> list[int]:
    last = batch.last_token_index.tolist()
    return [last.index(int(i)) for i in logits_index]
