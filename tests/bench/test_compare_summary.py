"""benchmarks/compare.py's summary: each run against the floor of the bandwidth sampled next to it, the
median run against the fastest sample, and the per-round decode ratios, from hand-computed values."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

COMPARE = Path(__file__).resolve().parents[2] / "benchmarks" / "compare.py"


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("compare_benchmark", COMPARE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(decode: float, bandwidth: float, prefill: float = 100.0) -> dict:
    return {"decode_tok_s": decode, "prefill_tok_s": prefill, "peak_rss": None, "bandwidth_bytes_s": bandwidth}


def test_each_run_meets_the_floor_of_its_own_bandwidth(compare):
    active = 1e9   # bytes a token: the floor is 1 / (bandwidth in GB/s) seconds
    runs = {"k3": [run(50, 60e9), run(40, 48e9), run(30, 45e9)],
            "llama.cpp": [run(40, 60e9), run(25, 50e9), run(36, 45e9)]}
    r = compare.summarize(runs, active, [45e9, 60e9, 48e9, 70e9, 50e9, 45e9])
    # k3's runs take 1/50, 1/40, 1/30 s against floors of 1/60, 1/48, 1/45 s: 1.2, 1.2, 1.5
    assert r["decode_over_floor"]["k3"] == pytest.approx(1.2)
    assert r["decode_over_floor"]["llama.cpp"] == pytest.approx(statistics.median([1.5, 2.0, 1.25]))
    # the strictest view: the median decode (40 and 36 tok/s) against the fastest sample (70 GB/s)
    assert r["bandwidth_bytes_s"] == 70e9
    assert r["decode_over_fastest_floor"]["k3"] == pytest.approx(70 / 40)
    assert r["decode_over_fastest_floor"]["llama.cpp"] == pytest.approx(70 / 36)
    assert r["decode_ratio_k3_over_llama.cpp"] == pytest.approx(40 / 36)
    assert r["decode_ratio_k3_over_llama.cpp_per_round"] == pytest.approx([50 / 40, 40 / 25, 30 / 36])
    assert r["prefill_ratio_k3_over_llama.cpp"] == pytest.approx(1.0)
    # at equal bandwidth: llama.cpp's median floor ratio over k3's
    assert r["decode_ratio_k3_over_llama.cpp_at_equal_bandwidth"] == pytest.approx(1.5 / 1.2)


def test_each_k3_form_is_compared_with_each_other_engine(compare):
    runs = {"k3": [run(50, 60e9)], "k3-int8": [run(55, 60e9)], "llama.cpp": [run(40, 60e9)],
            "mlx-lm": [run(10, 60e9)]}
    r = compare.summarize(runs, 1e9, [60e9])
    assert r["decode_ratio_k3-int8_over_llama.cpp"] == pytest.approx(55 / 40)
    assert r["decode_ratio_k3_over_mlx-lm_per_round"] == pytest.approx([5.0])
    assert not any("over_k3" in key for key in r)   # the two k3 forms are rows, not anchors of each other
