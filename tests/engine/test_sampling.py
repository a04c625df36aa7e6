import math

import pytest
import torch

from k3.engine import SamplingParams
from k3.ops.sampling import apply_penalties, filter_logits, sample_token, top_logprobs


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
    assert sample_token(logits, 0.0, 0, 1.0, 0.0, torch.Generator()) == int(logits.argmax())
    draws = [sample_token(logits, 1.0, 0, 1.0, 0.0, torch.Generator().manual_seed(3)) for _ in range(2)]
    assert draws[0] == draws[1]


def test_top_logprobs():
    logits = torch.tensor([1.0, 3.0, 2.0])
    lp, top = top_logprobs(logits, 0, 2)
    ref = torch.log_softmax(logits, -1)
    assert lp == pytest.approx(float(ref[0])) and list(top) == [1, 2]


def test_tiny_temperatures_are_greedy_not_nan():
    logits = torch.randn(100) * 50
    for t in (1e-300, 1e-9, 9e-6):
        assert sample_token(logits, t, 0, 1.0, 0.0, torch.Generator()) == int(logits.argmax())


def test_extreme_logits_still_sample():
    """Found by the server fuzz test: a tiny repetition_penalty turns logits into +-inf/NaN."""
    g = torch.Generator().manual_seed(0)
    logits = torch.tensor([1.0, float("inf"), -2.0, float("nan")])
    assert sample_token(logits, 1.0, 0, 1.0, 0.0, g) == 1          # +inf dominates, NaN never drawn
    penalised = apply_penalties(torch.tensor([3.0, 2.0, -1.0]), [0, 1], [], 1e-30, 0.0, 0.0)
    assert sample_token(penalised, 0.7, 0, 0.9, 0.05, g) in (0, 1, 2)
    assert sample_token(torch.full((4,), float("-inf")), 1.0, 0, 1.0, 0.0, g) in range(4)
