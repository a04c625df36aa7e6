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
    r = compare.summarize(runs, dict.fromkeys(runs, active), [45e9, 60e9, 48e9, 70e9, 50e9, 45e9])
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
    r = compare.summarize(runs, dict.fromkeys(runs, 1e9), [60e9])
    assert r["decode_ratio_k3-int8_over_llama.cpp"] == pytest.approx(55 / 40)
    assert r["decode_ratio_k3_over_mlx-lm_per_round"] == pytest.approx([5.0])
    assert not any("over_k3" in key for key in r)   # the two k3 forms are rows, not anchors of each other


def test_the_quantised_row_pairs_like_with_like_against_its_own_floor(compare):
    """k3's int8 trunk is set against llama.cpp's Q8_0 only (and the bf16 forms against the bf16 anchors), each
    engine's decode against the floor of the bytes its own trunk reads."""
    runs = {"k3": [run(50, 60e9)], "k3-int8-trunk": [run(80, 60e9)], "llama.cpp": [run(40, 60e9)],
            "llama.cpp-q8_0": [run(45, 60e9)]}
    active = {"k3": 1e9, "llama.cpp": 1e9, "k3-int8-trunk": 0.6e9, "llama.cpp-q8_0": 0.6e9}
    r = compare.summarize(runs, active, [60e9])
    assert compare.pairs(runs) == [("k3", "llama.cpp"), ("k3-int8-trunk", "llama.cpp-q8_0")]
    assert r["decode_ratio_k3-int8-trunk_over_llama.cpp-q8_0"] == pytest.approx(80 / 45)
    assert "decode_ratio_k3-int8-trunk_over_llama.cpp" not in r
    assert r["decode_over_floor"]["k3-int8-trunk"] == pytest.approx(60 / 0.6 / 80)   # floor 0.6 GB / 60 GB/s
    assert r["floor_s"]["k3"] == pytest.approx(1 / 60)


def test_int8_trunk_bytes_are_codes_and_scales(compare):
    """The quantised floor: 34 bytes per 32 weights of each quantised matrix (int8 codes, a bf16 scale), about
    half the bf16 trunk's bytes, the embedding apart."""
    from k3.config.presets import tiny
    from k3.streaming.plan import weight_bytes

    c = tiny()
    bf16_trunk = weight_bytes(c, None)[0]
    assert 0.45 * bf16_trunk < compare.int8_trunk_bytes(c) < 0.75 * bf16_trunk
