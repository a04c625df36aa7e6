"""Sampled speculative decoding keeps the target's distribution (rejection sampling), shown by chi-square
tests over many seeds: on the verifier alone, and through the engine on a small vocabulary."""

import math

import torch

from k3.engine import SamplingParams
from k3.engine.speculative import Drafter, SpeculativeConfig
from k3.ops.sampling import filter_logits
from k3.ops.speculative import verify_sampled
from fake_model import POISON, VOCAB, fake_engine

Z = 3.719   # one-sided normal quantile for p = 1e-4: a correct sampler fails about once in 10,000 runs


def chi2_ok(counts: torch.Tensor, expected: torch.Tensor) -> tuple[bool, float, float]:
    """Pearson's chi-square with cells of expected count < 5 pooled; the critical value at p = 1e-4
    from the Wilson-Hilferty approximation. -> (passes, statistic, critical value)."""
    big = expected >= 5
    obs = torch.cat((counts[big], counts[~big].sum().view(1)))
    exp = torch.cat((expected[big], expected[~big].sum().view(1)))
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = max(1, int(keep.sum()) - 1)
    crit = df * (1 - 2 / (9 * df) + Z * math.sqrt(2 / (9 * df))) ** 3
    return stat < crit, stat, crit


def test_verifier_emits_the_target_distribution_whatever_the_draft():
    p = torch.tensor([[0.05, 0.4, 0.15, 0.3, 0.1, 0.0], [0.2, 0.2, 0.1, 0.1, 0.25, 0.15], [0.3, 0.1, 0.1, 0.1, 0.1, 0.3]])
    n = 6000
    for drafts in ([1, 4], [5, 0], [3, 3]):
        first = torch.zeros(6)
        second = torch.zeros(6)
        accepted_first = 0
        for seed in range(n):
            out = verify_sampled(p, drafts, seed, drawn=7)
            first[out[0]] += 1
            if out[0] == drafts[0] and len(out) > 1:   # the first draft was accepted: the next token follows row 1
                accepted_first += 1
                second[out[1]] += 1
        ok, stat, crit = chi2_ok(first, p[0] * n)
        assert ok, (drafts, stat, crit, first.tolist())
        ok, stat, crit = chi2_ok(second, p[1] * second.sum())
        assert ok, (drafts, stat, crit, second.tolist())
        # Acceptance of draft 0 happens with probability p_0(d_0).
        rate, want = accepted_first / n, float(p[0, drafts[0]])
        assert abs(rate - want) < 4 * math.sqrt(max(want * (1 - want), 1e-9) / n) + 1e-9, (drafts, rate, want)


def _target(history: list[int], temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The soft fake model's distribution after `history` under these sampling parameters."""
    key = float(sum(history) + 3 * len(history))
    logits = torch.zeros(VOCAB, dtype=torch.float64)
    logits[:POISON] = torch.cos(torch.arange(POISON, dtype=torch.float64) * (0.37 + key * 0.011)) * 2.0
    logits[POISON] = -30.0
    return torch.softmax(filter_logits(logits.float() / temperature, top_k, top_p, 0.0), dim=-1)


class ModeProposer:
    """Drafts the chain of the target's most likely tokens: often right, often wrong."""

    def __init__(self, params):
        self.params = params

    def propose(self, items):
        out = []
        for ids, k in items:
            seq = list(ids)
            for _ in range(k):
                seq.append(int(_target(seq, self.params.temperature, self.params.top_k, self.params.top_p).argmax()))
            out.append(seq[len(ids):])
        return out


def test_engine_samples_with_windows_follow_the_target_distribution():
    params = dict(temperature=0.8, top_k=12, top_p=0.95, max_tokens=4, ignore_eos=True)
    config = {"method": "ngram", "num_speculative_tokens": 3}
    engine = fake_engine(soft=True, max_num_seqs=64, cache_memory=1 << 22, speculative_config=config)
    engine.drafter = Drafter(SpeculativeConfig.parse(config), ModeProposer(SamplingParams(**params)))
    engine.drafter.pace = _NeverPause()
    prompt = [4, 11, 7]
    n = 2500
    for seed in range(n):
        engine.add_request(prompt, SamplingParams(seed=seed, **params), request_id=str(seed))
    outs = []
    while engine.has_unfinished():
        outs += [o for o in engine.step() if o.finished]
    assert len(outs) == n and all(o.finish_reason == "length" for o in outs)
    st = engine.stats()
    assert 0 < st["spec_accepted_tokens"] < st["spec_drafted_tokens"]
    for pos in (1, 2, 3):   # tokens that came from verify windows (the first is a plain draw)
        counts, expected = torch.zeros(VOCAB), torch.zeros(VOCAB)
        for o in outs:
            counts[o.token_ids[pos]] += 1
            expected += _target(prompt + o.token_ids[:pos], 0.8, 12, 0.95)
        ok, stat, crit = chi2_ok(counts, expected)
        assert ok, (pos, stat, crit)


class _NeverPause(dict):
    """Keeps every request drafting (no back-off), so most of the tokens tested come from windows."""

    def setdefault(self, key, default):
        default.pause = 0
        return default
