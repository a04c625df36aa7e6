import math

import pytest
import torch

from k3.engine import SamplingParams
from k3.ops.sampling import (apply_penalties, apply_penalties_batched, filter_logits, filter_logits_batched,
                             hashed_uniform, sample_rows, top_logprobs)


def sample_token(logits, temperature, top_k, top_p, min_p, seed=0, counter=0) -> int:
    """One row through the batched sampler."""
    def col(v, dtype):
        return torch.tensor([v], dtype=dtype)

    return int(sample_rows(logits.float().unsqueeze(0), col(temperature, torch.float32), col(top_k, torch.long),
                           col(top_p, torch.float32), col(min_p, torch.float32), col(seed, torch.long),
                           col(counter, torch.long))[0])


@pytest.mark.parametrize("field,value", [
    ("max_tokens", 0), ("max_tokens", 1.5), ("temperature", -0.1), ("temperature", math.inf), ("top_p", 0.0),
    ("top_p", 1.1), ("top_k", -2), ("min_p", 1.5), ("seed", "7"), ("stop_token_ids", [-1]), ("stop", [""]),
    ("presence_penalty", 2.5), ("frequency_penalty", -3), ("repetition_penalty", 0), ("logprobs", 21),
    ("ignore_eos", "yes"),
])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"SamplingParams.{field}"):
        SamplingParams(**{field: value})


def test_stop_accepts_a_single_string():
    assert SamplingParams(stop="END").stop == ("END",)


def test_filters():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.isinf(filter_logits(logits, 2, 1.0, 0.0)).tolist() == [False, False, True, True]
    assert torch.isinf(filter_logits(logits, 0, 0.7, 0.0)).tolist() == [False, False, True, True]
    assert torch.isinf(filter_logits(logits, 0, 0.5, 0.0)).tolist() == [False, True, True, True]
    assert torch.isinf(filter_logits(logits, 0, 1.0, 0.2)).tolist() == [False, False, False, True]


def test_penalties():
    logits = torch.tensor([2.0, -2.0, 1.0, 0.5])
    out = apply_penalties(logits, [0], [1, 2, 2], 2.0, 0.0, 0.0)
    assert out.tolist() == [1.0, -4.0, 0.5, 0.5]
    out = apply_penalties(logits, [0], [1, 2, 2], 1.0, 0.5, 0.25)
    assert out.tolist() == [2.0, -2.0 - 0.75, 1.0 - 1.0, 0.5]


def test_greedy_and_seeded_sampling():
    logits = torch.randn(100)
    assert sample_token(logits, 0.0, 0, 1.0, 0.0) == int(logits.argmax())
    draws = [sample_token(logits, 1.0, 0, 1.0, 0.0, seed=3, counter=5) for _ in range(2)]
    assert draws[0] == draws[1]
    assert len({sample_token(logits, 1.0, 0, 1.0, 0.0, seed=3, counter=c) for c in range(50)}) > 10


def test_top_logprobs():
    logits = torch.tensor([1.0, 3.0, 2.0])
    lp, top = top_logprobs(logits, 0, 2)
    ref = torch.log_softmax(logits, -1)
    assert lp == pytest.approx(float(ref[0])) and list(top) == [1, 2]


def test_tiny_temperatures_are_greedy_not_nan():
    logits = torch.randn(100) * 50
    for t in (1e-300, 1e-9, 9e-6):
        assert sample_token(logits, t, 0, 1.0, 0.0) == int(logits.argmax())


def test_extreme_logits_still_sample():
    """Found by the server fuzz test: a tiny repetition_penalty turns logits into +-inf/NaN."""
    logits = torch.tensor([1.0, float("inf"), -2.0, float("nan")])
    assert sample_token(logits, 1.0, 0, 1.0, 0.0) == 1          # +inf dominates, NaN never drawn
    penalised = apply_penalties(torch.tensor([3.0, 2.0, -1.0]), [0, 1], [], 1e-30, 0.0, 0.0)
    assert sample_token(penalised, 0.7, 0, 0.9, 0.05) in (0, 1, 2)
    assert sample_token(torch.full((4,), float("-inf")), 1.0, 0, 1.0, 0.0) in range(4)


def test_batched_filters_equal_the_per_row_reference():
    gen = torch.Generator().manual_seed(5)
    params = [(0, 1.0, 0.0), (3, 1.0, 0.0), (0, 0.6, 0.0), (0, 1.0, 0.1), (7, 0.8, 0.05), (200, 0.9, 0.0), (1, 0.3, 0.5)]
    logits = torch.randn(len(params), 101, generator=gen) * 3
    got = filter_logits_batched(logits, torch.tensor([k for k, _, _ in params]), torch.tensor([p for _, p, _ in params]),
                                torch.tensor([m for _, _, m in params]))
    for row, (k, p, m) in enumerate(params):
        assert torch.equal(got[row], filter_logits(logits[row], k, p, m)), params[row]


def test_batched_penalties_equal_the_per_row_reference():
    gen = torch.Generator().manual_seed(6)
    logits = torch.randn(4, 30, generator=gen)
    prompts, outputs = [[0, 5], [], [7, 7, 8], [29]], [[1, 2, 2], [3], [], [29, 29, 4]]
    rep, pres, freq = [2.0, 1.0, 0.5, 1.3], [0.0, 0.5, 0.0, -1.0], [0.25, 0.0, 0.0, 1.5]
    got = apply_penalties_batched(logits, prompts, outputs, rep, pres, freq)
    for i in range(4):
        assert_close = torch.testing.assert_close
        assert_close(got[i], apply_penalties(logits[i], prompts[i], outputs[i], rep[i], pres[i], freq[i]))


@pytest.mark.parametrize("top_k,top_p,temperature", [(0, 1.0, 1.0), (3, 1.0, 1.0), (0, 0.8, 0.7)])
def test_draws_follow_the_filtered_distribution(top_k, top_p, temperature):
    """Chi-square over 20,000 draws (one per counter) against softmax(filter(logits / T))."""
    logits = torch.tensor([1.0, 0.5, 0.0, -0.5, -1.0, -3.0])
    expect = torch.softmax(filter_logits(logits / temperature, top_k, top_p, 0.0), -1)
    n = 20_000
    rows = logits.expand(n, -1).contiguous()
    draws = sample_rows(rows, torch.full((n,), temperature), torch.full((n,), top_k), torch.full((n,), top_p),
                        torch.zeros(n), torch.full((n,), 12345), torch.arange(n))
    counts = torch.bincount(draws, minlength=6).double()
    support = expect > 0
    assert counts[~support].sum() == 0, "a filtered-out token was drawn"
    e = expect[support].double() * n
    chi2 = float(((counts[support] - e) ** 2 / e).sum())
    assert chi2 < 25.0, (chi2, counts.tolist(), e.tolist())   # df <= 5: p < 1e-4 for a correct sampler


def test_a_row_draws_the_same_whatever_its_batchmates():
    gen = torch.Generator().manual_seed(8)
    logits = torch.randn(5, 64, generator=gen)
    ones = torch.ones(5)
    together = sample_rows(logits, ones, torch.zeros(5, dtype=torch.long), ones, torch.zeros(5),
                           torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 9, 9, 2, 7]))
    for i, (seed, counter) in enumerate([(1, 0), (2, 9), (3, 9), (4, 2), (5, 7)]):
        assert sample_token(logits[i], 1.0, 0, 1.0, 0.0, seed, counter) == int(together[i])


def test_hashed_uniforms_are_uniform_and_keyed():
    u = hashed_uniform(torch.tensor([7, 7, 8]), torch.tensor([0, 1, 0]), 50_000)
    assert bool(((u > 0) & (u <= 1)).all())
    for row in u:
        assert abs(float(row.mean()) - 0.5) < 0.01 and abs(float(row.var()) - 1 / 12) < 0.005
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[0], u[2])
    assert abs(float(torch.corrcoef(u)[0, 1])) < 0.02 and abs(float(torch.corrcoef(u)[0, 2])) < 0.02


@pytest.mark.parametrize("top_k,top_p,min_p", [(5, 1.0, 0.0), (0, 0.9, 0.0), (40, 0.95, 0.02), (0, 0.5, 0.1)])
def test_the_candidate_shortcut_draws_what_the_whole_vocabulary_draws(top_k, top_p, min_p, monkeypatch):
    """Rows that top-k/top-p confine draw among their best CANDIDATES tokens: the same tokens as the
    full-vocabulary race over the same noise."""
    import k3.ops.sampling as sampling

    gen = torch.Generator().manual_seed(top_k + int(top_p * 100))
    n = 200
    logits = torch.randn(n, 3000, generator=gen) * 2
    args = (torch.full((n,), 0.9), torch.full((n,), top_k), torch.full((n,), top_p), torch.full((n,), min_p),
            torch.arange(n) * 7 + 1, torch.arange(n) % 5)
    assert sampling._candidates(logits / 0.9, *args[1:4]) is not None, "the shortcut should apply here"
    fast = sample_rows(logits, *args)
    monkeypatch.setattr(sampling, "_candidates", lambda *a: None)
    assert torch.equal(fast, sample_rows(logits, *args))
