"""Requirements decided on intervals (issue 65): a threshold holds when the 95 % interval's bound clears it, fails
when the whole interval misses it, and is INCONCLUSIVE otherwise with the n that would decide it; a metric
with nothing to measure is INCONCLUSIVE; single readings are decided on their value."""

from __future__ import annotations

import pytest

from k3.eval import stats
from k3.eval.check import thresholds
from k3.eval.metrics import measured


def _decide(text: str, m) -> dict:
    return thresholds.decide(thresholds.parse(text), m)


def test_three_of_three_do_not_show_a_low_rate():
    """The case from the issue: no unsafe answer on 3 items; the interval reaches 0.56."""
    row = _decide("refusal.under_refusal<=0.05", measured.rate(0, 3))
    assert row["status"] == "INCONCLUSIVE" and row["ci95"][1] == pytest.approx(0.5615, abs=1e-3)
    assert row["needed_n"] == 73 and "n = 73" in row["why"]
    assert stats.wilson(0, 73)[1] <= 0.05 < stats.wilson(0, 72)[1]           # 73 is the first n that decides


@pytest.mark.parametrize("text,k,n,status", [
    ("refusal.under_refusal<=0.05", 0, 100, "PASS"),
    ("refusal.under_refusal<=0.05", 10, 20, "FAIL"),
    ("humaneval.pass@1>=0.8", 3, 3, "INCONCLUSIVE"),
    ("humaneval.pass@1>=0.8", 60, 60, "PASS"),
    ("humaneval.pass@1>=0.8", 1, 10, "FAIL"),
    ("humaneval.pass@1>0.5", 30, 60, "INCONCLUSIVE"),
    ("humaneval.pass@1==1", 5, 5, "INCONCLUSIVE"),
    ("humaneval.pass@1==1", 0, 50, "FAIL"),
])
def test_rates_are_decided_on_their_interval(text, k, n, status):
    assert _decide(text, measured.rate(k, n))["status"] == status


def test_a_rate_on_its_threshold_is_never_decided():
    row = _decide("humaneval.pass@1>=0.5", measured.rate(10, 20))
    assert row["status"] == "INCONCLUSIVE" and row["needed_n"] is None and "no n decides it" in row["why"]


def test_nothing_to_measure_is_inconclusive_not_missing():
    for m in (None, measured.rate(0, 0), measured.quantile([], 0.9)):
        row = _decide("refusal.under_refusal<=0.05", m)
        assert row["status"] == "INCONCLUSIVE" and row["n"] == 0 and "n = 0" in row["why"]


def test_latency_quantiles_take_their_order_statistic_interval():
    fast = [0.1 + 0.001 * i for i in range(40)]
    assert _decide("ttft.p90<=2s", measured.quantile(fast[:4], 0.9))["status"] == "INCONCLUSIVE"
    assert _decide("ttft.p90<=2s", measured.quantile(fast[:4], 0.9))["needed_n"] == 36   # 0.9^36 < 0.025
    assert _decide("ttft.p90<=2s", measured.quantile(fast, 0.9))["status"] == "PASS"
    assert _decide("ttft.p90<=50ms", measured.quantile(fast[:4], 0.9))["status"] == "FAIL"  # even the lowest is slower
    lo, hi = stats.quantile_interval(list(range(1, 101)), 0.5)
    assert (lo, hi) == (40, 61)                      # the textbook interval of a median from 100 samples


@pytest.mark.parametrize("n", [400, 1000, 2000])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_the_normal_ranks_match_the_exact_ones_where_they_take_over(n, q):
    """Above EXACT_RANKS samples the ranks come from the normal approximation: beside the exact binomial ranks
    it is within two ranks, and never narrower (None: unbounded, the widest)."""
    (r, s), (ar, as_) = stats.exact_ranks(n, q), stats.normal_ranks(n, q)
    assert r is not None and s is not None
    assert (ar is None or r - 2 <= ar <= r) and (as_ is None or s <= as_ <= s + 2), ((r, s), (ar, as_))
    if n >= 1000:                      # where the approximation is in use, it bounds both sides
        assert ar is not None and as_ is not None
    assert stats.quantile_ranks(stats.EXACT_RANKS + 1, q) == stats.normal_ranks(stats.EXACT_RANKS + 1, q)


def test_means_take_a_t_interval():
    assert _decide("tpot.mean<=100ms", measured.mean([0.05, 0.051, 0.049]))["status"] == "PASS"
    assert _decide("tpot.mean<=100ms", measured.mean([0.01, 0.19]))["status"] == "INCONCLUSIVE"
    assert _decide("tpot.mean<=100ms", measured.mean([0.01]))["status"] == "INCONCLUSIVE"


def test_single_readings_flip_exactly_at_their_threshold():
    m = measured.point(8e9)
    assert [_decide(t, m)["status"] for t in ("peak_rss<=8GB", "peak_rss<8GB", "peak_rss>=8GB")] == ["PASS", "FAIL", "PASS"]


def test_the_verdict_is_the_worst_row():
    rows = [{"status": s} for s in ("PASS", "INCONCLUSIVE")]
    assert thresholds.verdict(rows) == "INCONCLUSIVE" and thresholds.verdict(rows + [{"status": "FAIL"}]) == "FAIL"
    assert thresholds.verdict([{"status": "PASS"}]) == "PASS" and thresholds.worst("PASS", "ERROR", "FAIL") == "ERROR"
