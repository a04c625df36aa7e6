"""k3 doctor: format, code paths, unsupported parts, machine facts, plan and the engines table."""

from __future__ import annotations

import json

import pytest

from k3.cli.main import main
from k3.config.presets import released
from k3.streaming.plan import plan_memory
from k3.tools.doctor import diagnose
from k3.tools.estimate import estimate

PER_EXPERT = 3072 * (1792 + 112) * 2 + 3584 * (1536 + 96)  # spec §3.2


@pytest.fixture(autouse=True)
def big_machine(monkeypatch):
    """A machine with 1 TB available: these tests check plans, not this machine's memory (a budget over what it
    has is a problem of its own: test_a_budget_over_this_machines_memory_is_a_problem)."""
    from k3.tools import machine

    monkeypatch.setattr(machine, "memory", lambda: (2 ** 40, 2 ** 40))


def test_a_budget_over_this_machines_memory_is_a_problem(monkeypatch, capsys):
    """Issue 69: `k3 doctor ... --memory-budget 200GB` on a 25 GB machine said "problems: none"."""
    from k3.tools import machine

    monkeypatch.setattr(machine, "memory", lambda: (25 * 10 ** 9, 24 * 10 ** 9))
    code, report = doctor_json(capsys, "k3", "--memory-budget", "200GB", "--no-measure")
    assert code == 1 and report["problems"] == [
        "--memory-budget 200.0 GB is more than this machine has available (24.0 of 25.0 GB): the plan below would "
        "not run here; ask for at most 21GB, or use `k3 plan` to plan for another machine"]
    code, report = doctor_json(capsys, "k3", "--memory-budget", "20GB", "--no-measure")
    assert code == 0 and report["problems"] == []


def doctor_json(capsys, *args) -> tuple[int, dict]:
    code = main(["doctor", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_released_preset_plan_and_tables(capsys):
    code, report = doctor_json(capsys, "k3", "--memory-budget", "200GB", "--no-measure")
    assert code == 0
    assert report["format"]["expert_format"] == "mxfp4" and report["format"]["experts"] == 896
    plan = report["plan"]
    assert plan["mode"] == "stream-experts"
    assert plan["expert_bytes_per_token"] == 16 * 92 * PER_EXPERT  # 25.8 GB, spec §7
    assert plan["expert_bytes_total"] == 896 * 92 * PER_EXPERT
    assert {e["engine"] for e in report["engines"]} >= {"vLLM", "SGLang", "llama.cpp", "colibri"}
    assert any("MXFP4" in row["k3"] for row in report["code_paths"])


def test_doctor_plans_an_int8_trunk_at_load(capsys):
    code, report = doctor_json(capsys, "k3", "--memory-budget", "64GB", "--trunk", "int8", "--no-measure", "--no-vision")
    assert code == 0
    plan = report["plan"]
    expected = plan_memory(released().replace(vision=None), 64 * 10 ** 9, int8_at_load=True)
    assert plan["trunk_format"] == "int8 at load" and plan["mode"] == expected.mode == "stream-experts"
    assert plan["trunk_bytes"] == expected.trunk_bytes < 62 * 10 ** 9
    assert main(["doctor", "k3", "--memory-budget", "64GB", "--trunk", "int8", "--no-measure", "--no-vision"]) == 0
    assert "trunk 61.02 GB (int8 at load)" in capsys.readouterr().out


def test_estimate_modes_and_arithmetic():
    c = released().replace(vision=None)
    fits = estimate(c, 10 ** 13, mem_bw=20e9, disk_bw=3e9, state_bytes=0)   # arithmetic without a state cache
    assert fits.mode == "resident" and fits.hit_rate == 1.0 and fits.streamed_bytes_per_token == 0
    assert fits.seconds_per_token == pytest.approx((fits.trunk_bytes + fits.expert_bytes_per_token) / 20e9)
    small = estimate(c, 64 * 10 ** 9, mem_bw=20e9, disk_bw=3e9, state_bytes=0)
    assert small.trunk_bytes > 64 * 10 ** 9                                  # spec: ~111 GB of BF16 trunk
    plan = plan_memory(c, 64 * 10 ** 9)                                      # so layers stream too
    assert small.mode == "stream-trunk" and small.streamed_layers == len(plan.streamed_layers) > 0
    assert small.seconds_per_token == pytest.approx(plan.seconds_per_token(3e9, 20e9))
    assert small.streamed_bytes_per_token > small.trunk_streamed_bytes_per_token > 0
    tiny_budget = estimate(c, 8 * 10 ** 9, mem_bw=20e9, disk_bw=3e9, state_bytes=0)
    with pytest.raises(ValueError) as planner:
        plan_memory(c, 8 * 10 ** 9)
    # doctor says what k3 does at this budget: the planner's refusal, never a plan nothing runs
    assert tiny_budget.mode == "refused" and tiny_budget.seconds_per_token is None
    assert tiny_budget.refusal == str(planner.value)
    mid = estimate(c, 200 * 10 ** 9, mem_bw=20e9, disk_bw=3e9, state_bytes=0)
    expect_hit = ((200 * 10 ** 9 - mid.trunk_bytes) // PER_EXPERT) / (mid.expert_bytes_total // PER_EXPERT)
    assert mid.hit_rate == pytest.approx(expect_hit)
    assert mid.seconds_per_token == pytest.approx(
        (mid.trunk_bytes + mid.expert_bytes_per_token * expect_hit) / 20e9
        + mid.expert_bytes_per_token * (1 - expect_hit) / 3e9)


def test_checkpoint_directory_with_measurements(tiny_checkpoint, capsys):
    code, report = doctor_json(capsys, str(tiny_checkpoint))
    assert code == 0 and not report["problems"] and not report["unsupported"]
    m = report["machine"]
    assert m["disk_read_bytes_per_s"] > 0 and m["mem_bytes_per_s"] > 0 and m["mem_total"] > 0
    assert report["plan"]["mode"] == "resident"
    assert main(["doctor", str(tiny_checkpoint), "--no-measure"]) == 0
    text = capsys.readouterr().out
    assert "k3 code paths" in text and "memory plan" in text and "other engines" in text


def test_unsupported_quantisation_is_reported_not_raised(tiny_copy, capsys):
    d = tiny_copy
    raw = json.loads((d / "config.json").read_text())
    raw["text_config"]["quantization_config"]["format"] = "nvfp4-pack-quantized"
    raw["text_config"]["quantization_config"]["config_groups"]["group_0"]["format"] = "nvfp4-pack-quantized"
    (d / "config.json").write_text(json.dumps(raw))
    code, report = doctor_json(capsys, str(d), "--no-measure")
    assert code == 1 and any("nvfp4" in u or "quantization" in u for u in report["unsupported"])


def test_tensors_outside_the_layout_are_unsupported(tiny_copy):
    from k3.config import load_config
    from k3.testing.checkpoint import rewrite_shard

    d = tiny_copy
    name = "language_model.model.layers.0.self_attn.mystery.weight"
    rewrite_shard(d, "language_model.model.norm.weight",
                  lambda t: t.__setitem__(name, next(iter(t.values())).clone()))

    report = diagnose(str(d), load_config(d), d, measure=False)
    assert any(name in u for u in report.unsupported)
