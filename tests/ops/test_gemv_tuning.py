"""The decode GEMVs' row-length split (k3.ops.native.decode_gemv, tuning.py): the environment sets one form
for every weight; otherwise the split is measured on this CPU once, remembered per CPU, level and thread
count, and decided by the measured ratios; the kernels honour it per weight with the same bits either way."""

from __future__ import annotations

import json

import pytest
import torch

import k3.ops.native as native_module
from k3.ops.native import decode_gemv, tuning


@pytest.fixture
def fresh_choice(monkeypatch, tmp_path):
    """decode_gemv asked anew, its measurements kept under tmp_path; `measure` counts its calls and answers
    a 4 KB split (no real timing). The cached answer is cleared again after."""
    native_module.native()   # built and set up where the kernels live, before the cache moves
    monkeypatch.setenv("K3_NATIVE_CACHE", str(tmp_path))
    monkeypatch.delenv("K3_DECODE_GEMV", raising=False)
    monkeypatch.setattr(tuning, "_measured", {})
    calls = []

    def measure(kernels, rule):
        calls.append(rule)
        return {"sequential_row_bytes": 4096, "rule": rule}

    monkeypatch.setattr(tuning, "measure", measure)
    decode_gemv.cache_clear()
    yield calls
    decode_gemv.cache_clear()


def test_the_environment_sets_one_form_for_every_weight_and_a_bad_value_is_refused(fresh_choice, monkeypatch):
    for value, row_bytes in (("tiles", 0), ("sequential", tuning.ALWAYS)):
        monkeypatch.setenv("K3_DECODE_GEMV", value)
        decode_gemv.cache_clear()
        assert decode_gemv() == row_bytes
    monkeypatch.setenv("K3_DECODE_GEMV", "rows")
    decode_gemv.cache_clear()
    with pytest.raises(ValueError, match="K3_DECODE_GEMV='rows': expected one of sequential, tiles"):
        decode_gemv()
    assert fresh_choice == [], "a form the environment names is never measured"


def test_the_split_is_measured_once_and_remembered_for_this_cpu(fresh_choice, tmp_path):
    if native_module.native() is None or native_module.simd_level() < 1:
        pytest.skip("the scalar kernels have one form")
    assert decode_gemv() == 4096
    kept = json.loads((tmp_path / "tuning.json").read_text())
    (key,) = kept
    settings = f"simd {native_module.simd_level()}; prefetch {native_module.weight_prefetch()}"
    assert key == tuning.cpu_key(settings, torch.get_num_threads())
    assert kept[key]["sequential_row_bytes"] == 4096
    tuning._measured.clear()
    decode_gemv.cache_clear()
    assert decode_gemv() == 4096 and len(fresh_choice) == 1, "the remembered split is read, not measured again"


def test_a_split_holds_for_the_prefetch_hint_it_was_measured_under(fresh_choice, monkeypatch, tmp_path):
    """Sequential rows under non-temporal prefetches streamed at half the tiles' speed on an Ice Lake: a
    split measured under one hint is never used under the other."""
    if native_module.native() is None or native_module.simd_level() < 1:
        pytest.skip("the scalar kernels have one form")
    try:
        for hint in ("t0", "nta", "t0"):
            monkeypatch.setenv("K3_WEIGHT_PREFETCH", hint)
            native_module.weight_prefetch.cache_clear()
            decode_gemv.cache_clear()
            decode_gemv()
        assert len(fresh_choice) == 2
        kept = json.loads((tmp_path / "tuning.json").read_text())
        assert sorted("prefetch nta" in key for key in kept) == [False, True]
    finally:
        monkeypatch.delenv("K3_WEIGHT_PREFETCH")
        native_module.weight_prefetch.cache_clear()


def test_an_unwritable_cache_measures_once_a_process(fresh_choice, tmp_path):
    if native_module.native() is None or native_module.simd_level() < 1:
        pytest.skip("the scalar kernels have one form")
    (tmp_path / "tuning.json").mkdir()   # a folder where the file should go: reads and writes fail
    for _ in range(2):
        decode_gemv.cache_clear()
        assert decode_gemv() == 4096
    assert len(fresh_choice) == 1


def test_a_failed_measurement_keeps_the_rule_says_so_and_is_not_remembered(fresh_choice, monkeypatch, tmp_path):
    def fails(kernels, rule):
        raise MemoryError("no room for the weights")

    monkeypatch.setattr(tuning, "measure", fails)
    with pytest.warns(UserWarning, match="could not measure the decode GEMV forms .*no room"):
        assert tuning.sequential_row_bytes(object(), 0, tmp_path / "tuning.json", 2, "t0") == 0
    assert not (tmp_path / "tuning.json").exists()


def test_the_scalar_level_and_the_rule_need_no_measurement(fresh_choice, monkeypatch, tmp_path):
    assert tuning.sequential_row_bytes(None, 0, tmp_path / "tuning.json", 0, "t0") == 0
    monkeypatch.setattr(native_module, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(native_module, "simd_level", lambda: 2)
    assert native_module._gemv_rule() == tuning.ALWAYS
    monkeypatch.setattr(native_module, "cpu_vendor", lambda: "GenuineIntel")
    assert native_module._gemv_rule() == 0
    assert fresh_choice == []


@pytest.mark.parametrize("ratios,rule,split", [
    ({2048: 1.08, 4096: 1.04, 6144: 0.95, 14336: 0.90}, 0, 4096),               # short rows sequential
    ({2048: 1.08, 4096: 1.04, 6144: 0.95, 14336: 0.90}, tuning.ALWAYS, 4096),
    ({2048: 1.10, 4096: 1.09, 6144: 1.05, 14336: 1.04}, 0, tuning.ALWAYS),       # every row sequential
    ({2048: 0.90, 4096: 0.95, 6144: 0.93, 14336: 0.90}, tuning.ALWAYS, 0),       # every row in tiles
    ({2048: 1.01, 4096: 0.99, 6144: 1.01, 14336: 0.995}, tuning.ALWAYS, tuning.ALWAYS),   # a tie: the rule
    ({2048: 1.015, 4096: 1.01, 6144: 0.99, 14336: 0.99}, 0, 0),                  # gains within TIE: the rule
])
def test_the_split_makes_the_measured_rows_fastest_and_a_tie_keeps_the_rule(ratios, rule, split):
    assert tuning.decide(ratios, rule) == split


def test_a_measured_ratio_times_both_forms_and_leaves_the_setting_alone():
    kernels = native_module.native()
    if kernels is None or native_module.simd_level() < 1:
        pytest.skip("the scalar kernels have one form")
    before = kernels.set_gemv_sequential_bytes(1234)
    try:
        ratio = tuning.time_ratio(kernels, torch.full((4 << 20,), 0.5, dtype=torch.bfloat16), 512, rounds=3)
        assert 0.2 < ratio < 5
        assert kernels.set_gemv_sequential_bytes(1234) == 1234
    finally:
        kernels.set_gemv_sequential_bytes(before)


def test_every_split_gives_each_weight_the_same_bits():
    """Whatever split the setting names (below, between and above two weights' row lengths), each weight
    gives the bits of the tiles (bf16 and int8 trunks)."""
    from k3.ops.int8 import quantize

    kernels = native_module.native()
    if kernels is None:
        pytest.skip("no native kernels")
    gen = torch.Generator().manual_seed(5)
    x = {K: torch.randn(1, K, generator=gen) for K in (96, 1031)}
    bf16 = {K: torch.randn(67, K, generator=gen).bfloat16() for K in x}
    int8 = {K: quantize(torch.randn(67, K, generator=gen)) for K in x}
    before = kernels.set_gemv_sequential_bytes(0)
    try:
        out = {}
        for row_bytes in (0, 2 * 96, 1031, 2 * 1031, tuning.ALWAYS):   # between the rows' lengths, and around
            kernels.set_gemv_sequential_bytes(row_bytes)
            out[row_bytes] = [kernels.bf16_linear(x[K], bf16[K]) for K in x] + \
                             [kernels.int8_linear(x[K], *int8[K]) for K in x]
        for got in out.values():
            assert all(torch.equal(a, b) for a, b in zip(got, out[0]))
    finally:
        kernels.set_gemv_sequential_bytes(before)


def test_the_budget_streams_past_the_last_level_cache_within_the_memory_available(monkeypatch):
    assert tuning.last_level_cache_bytes() > 0
    monkeypatch.setattr(tuning, "available_bytes", lambda: 64 << 30)
    for llc, budget in ((32 << 20, tuning.MIN_BYTES), (300 << 20, 600 << 20), (2 << 30, tuning.MAX_BYTES)):
        monkeypatch.setattr(tuning, "last_level_cache_bytes", lambda llc=llc: llc)
        assert tuning.budget_bytes() == budget
    monkeypatch.setattr(tuning, "available_bytes", lambda: 1 << 30)
    assert tuning.budget_bytes() == 128 << 20


def test_the_split_reads_as_words():
    assert tuning.describe(0) == "tiles" and tuning.describe(tuning.ALWAYS) == "sequential"
    assert tuning.describe(4096) == "sequential to 4 KB rows"
