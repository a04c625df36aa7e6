"""A weightless model for engine tests: its next token is a known function of everything the engine
cached for the sequence, read back through the same state views and step states a real model uses.

MLA view: each token id is stored in c_kv[..., 0]; the whole history is read back on every step.
KDA view: recurrent[..., 0, 0, 0] counts tokens seen and [..., 0, 0, 1] sums their ids.
next = (sum(history) + 3 * count) % (vocab - 1). A sequence whose history contains POISON (the last id,
never generated), or whose KDA sum disagrees with its MLA history (state of another prefix, or drafts a
rejected verify window left behind), gets NaN logits. Verify windows (speculative decoding) run on the
runner's step states, keep their inputs for the rollback's replay as K3's KDA layers do (`window_step`),
and give logits at every window position. `soft=True` spreads the
logits over the vocabulary (a known distribution per history) for tests of sampled speculation.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from k3.layers.state import StateLayout

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


def drain(engine) -> dict:
    """Step until nothing is left -> request id -> its final RequestOutput."""
    outs = {}
    while engine.has_unfinished():
        for o in engine.step():
            if o.finished:
                outs[o.request_id] = o
    return outs


def fake_engine(**kw):
    from k3.engine import EngineConfig, build_engine

    kw.setdefault("cache_memory", 1 << 20)
    model = {k: kw.pop(k) for k in ("eos_token_id", "soft") if k in kw}
    tokenizer = kw.pop("tokenizer", None)
    return build_engine(FakeModel(**model), EngineConfig(**kw), tokenizer=tokenizer)


class FakeModel(nn.Module):
    def __init__(self, eos_token_id: int | None = 48, soft: bool = False):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1), requires_grad=False)
        self.config = SimpleNamespace(vocab_size=VOCAB, eos_token_id=eos_token_id, num_hidden_layers=2,
                                      max_position_embeddings=1 << 20)
        self.compute_dtype = torch.float64
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        self.soft = soft

    def state_layout(self) -> StateLayout:
        return StateLayout(kda_layers=(0,), kda_heads=1, kda_key_dim=2, kda_value_dim=2, conv_tail=1,
                         kda_channels=2, mla_layers=(1,), mla_rank=3, mla_extra=1)

    def forward_batch(self, input_ids, batch, views, logits_index, step_states=None):
        self.calls.append((batch.seq_lens, batch.context_lens))
        kda, mla = views
        rows: dict[int, torch.Tensor] = {}   # packed position -> logits (last positions and window positions)
        for group in batch.groups(by_context=True):
            ids = input_ids[group.index].to(torch.float64)                      # [b, T]
            if group.window:
                at = [tuple(g.seqs) for g in batch.step_groups()].index(tuple(group.seqs))
                self._window(group, ids, step_states[0][at], step_states[1][at], rows)
                continue
            seqs, (b, T) = group.seqs, ids.shape
            c = torch.zeros(b, T, 3, dtype=torch.float64)
            c[..., 0] = ids
            c_all, _, _ = mla.extend(seqs, c, torch.zeros(b, T, 1, dtype=torch.float64))
            rec, tails = kda.gather(seqs)
            rec = rec.clone()
            rec[:, 0, 0, 0] += T
            rec[:, 0, 0, 1] += ids.sum(1)
            kda.scatter(seqs, rec, tails)
            for row, s in enumerate(seqs):
                rows[int(group.index[row, -1])] = self._logits(c_all[row, :, 0], rec[row, 0, 0, 0], rec[row, 0, 0, 1])
        return torch.stack([rows[int(i)] for i in logits_index]) if len(logits_index) else torch.zeros(0, VOCAB)

    def window_step(self, layer, replay):
        """The replay of a window's KDA position t from the ids the window kept in replay[4] (K3's beta slot)."""
        def step(t, sel, pools):
            rec, _, index = pools
            ids = replay[4][:, t, 0] if sel is None else replay[4][sel, t, 0]
            rec[index, 0, 0, 0] += 1
            rec[index, 0, 0, 1] += ids
            return rec[index, 0, 0, :2].clone().unsqueeze(1)                  # [n, 1, 2]: count, sum
        return step

    def _window(self, group, ids, kda, mla, rows) -> None:
        """kda, mla: the window group's step states (layers/step_state.py), read as a real model's are."""
        b, T = ids.shape
        replay = kda.replay
        replay[4][..., 0] = ids
        step = self.window_step(0, replay)
        counts = torch.cat([step(t, None, (kda.recurrent, kda.tails, kda.index)) for t in range(T)], dim=1)  # [b, T, 2]
        c = torch.zeros(b, T, 4, dtype=torch.float64)
        c[..., 0] = ids
        mla.pool.index_copy_(0, mla.new_rows, c.reshape(b * T, 4))
        bs = mla.block_size
        for r in range(b * T):
            pos = torch.arange(int(mla.lens[r]))
            history = mla.pool[mla.tables[r, pos // bs].long() * bs + pos % bs, 0]
            i, t = divmod(r, T)
            rows[int(group.index[i, t])] = self._logits(history, counts[i, t, 0], counts[i, t, 1])

    def _logits(self, history: torch.Tensor, count, kda_sum) -> torch.Tensor:
        out = torch.zeros(VOCAB, dtype=torch.float64)
        if bool((history == POISON).any()) or history.sum() != kda_sum:
            return out.fill_(float("nan"))
        if self.soft:   # a spread, history-dependent distribution over the ids below POISON
            key = float(history.sum() + 3 * count)
            out[:POISON] = torch.cos(torch.arange(POISON, dtype=torch.float64) * (0.37 + key * 0.011)) * 2.0
            out[POISON] = -30.0   # never drawn in practice, and finite (the engine refuses non-finite logits)
            return out
        out[int(history.sum() + 3 * count) % (VOCAB - 1)] = 10.0
        return out
