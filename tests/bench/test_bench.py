"""k3 bench: every metric against hand-computed values from a scripted server; failures counted,
not crashed on; a local in-process run fills every field of the JSON."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from fake_openai import FakeOpenAI, Script

from k3.bench.main import run_bench
from k3.bench.openai_client import OpenAIClient
from k3.bench.workloads import fixed, multi_turn
from k3.cli.main import main

TOL = 0.04  # seconds: scheduling noise on a loaded 2-core machine
SLOW = 0.15  # seconds: the noise is one-sided (a request is never faster than its script, only later)


def near(value_ms: float, want_ms: float) -> bool:
    """A measured latency against its scripted value: not below it by more than TOL (rounding of the
    fake server's sleeps), at most SLOW above it (a loaded machine delays; it never hurries)."""
    return want_ms - TOL * 1000 <= value_ms <= want_ms + SLOW * 1000


def args(**kw):
    base = dict(concurrency=1, request_rate=float("inf"), warmup=0, seed=0, goodput=None)
    return SimpleNamespace(**(base | kw))


def test_metrics_equal_hand_computed_values():
    scripts = [Script(first_delay=0.3, gap=0.1, reasoning=2, content=3)]
    with FakeOpenAI(scripts) as server:
        client = OpenAIClient(server.url, "chat", model="fake-k3")
        result, records = run_bench(client, fixed(3, 8, 5, 1000, 0), args(goodput=["ttft:400", "tpot:50"]))
    assert result["completed"] == 3 and result["failed"] == 0
    # Per request: TTFT 0.3 s; 5 chunks 0.1 s apart; E2E 0.3 + 4 x 0.1; TPOT (E2E - TTFT) / 4 = 0.1;
    # first visible token after the 2 reasoning chunks: 0.3 + 2 x 0.1.
    for key, want in (("ttft_ms", 300), ("tpot_ms", 100), ("itl_ms", 100), ("e2el_ms", 700), ("ttfvt_ms", 500)):
        for stat in ("mean", "p50", "p99"):
            assert near(result[key][stat], want), (key, stat, result[key][stat])
    assert result["total_output_tokens"] == 15 and result["reasoning_tokens"] == 6
    assert result["total_input_tokens"] == 3 * 17  # from the server's usage
    assert 3 * (0.7 - TOL) <= result["duration_s"] <= 3 * (0.7 + SLOW)
    assert result["request_throughput"] == pytest.approx(3 / result["duration_s"])
    assert result["output_throughput"] == pytest.approx(15 / result["duration_s"])
    assert result["total_token_throughput"] == pytest.approx((15 + 51) / result["duration_s"])
    assert result["goodput"] == 0.0  # TPOT 100 ms misses the 50 ms SLO
    assert all(len(r.itl) == 4 for r in records)


def test_percentiles_over_requests_that_differ():
    """Three requests with TTFTs of 0.1, 0.2 and 0.6 s (served in order, concurrency 1): the mean, median
    and p90/p99 are those of numpy's linear interpolation over [100, 200, 600] ms, not of one value."""
    scripts = [Script(first_delay=d, gap=0.05, content=3) for d in (0.1, 0.2, 0.6)]
    with FakeOpenAI(scripts) as server:
        client = OpenAIClient(server.url, "chat", model="fake-k3")
        result, _ = run_bench(client, fixed(3, 8, 3, 1000, 0), args())
    ttft = result["ttft_ms"]
    for stat, want in (("mean", 300), ("p50", 200), ("p90", 200 + 0.8 * 400), ("p99", 200 + 0.98 * 400)):
        assert near(ttft[stat], want), (stat, ttft)
    assert ttft["p99"] > ttft["p90"] > ttft["p50"] + 100
    # E2E = TTFT + 2 gaps of 0.05 s, request by request.
    assert near(result["e2el_ms"]["p50"], 300)


def test_failures_are_counted_with_reasons():
    scripts = [Script(), Script(status=500), Script(malformed_at=1), Script(stall=2.0), Script(no_done=True),
               Script(content=0, usage=False)]
    with FakeOpenAI(scripts) as server:
        client = OpenAIClient(server.url, "chat", model="fake-k3", timeout=0.8)
        result, _ = run_bench(client, fixed(6, 8, 5, 1000, 0), args(goodput=["ttft:1000"]))
    assert result["completed"] == 1 and result["failed"] == 5
    reasons = " | ".join(result["failure_reasons"])
    for fragment in ("HTTP 500", "malformed stream chunk", "timeout", "without [DONE]", "no tokens"):
        assert fragment in reasons
    assert result["good_requests"] == 1


def test_request_rate_concurrency_and_multi_turn_order():
    with FakeOpenAI([Script(first_delay=0.05, gap=0.01)]) as server:
        client = OpenAIClient(server.url, "completions", model="fake-k3")
        prompts = multi_turn(2, 3, 4, 3, 1000, 0)
        result, records = run_bench(client, prompts, args(concurrency=2, request_rate=50.0))
        bodies = server.served
    assert result["completed"] == 6
    for r in records:  # each turn starts after its conversation's previous turn ended
        p = prompts[r.index]
        if p.after is not None:
            assert r.start >= records[p.after].end
    assert all(isinstance(b["prompt"], list) for b in bodies)  # completions get token ids


def test_local_run_fills_every_field(tiny_checkpoint, tmp_path, capsys):
    code = main(["bench", "--json", "--model", str(tiny_checkpoint), "--num-prompts", "4", "--input-len", "9",
                 "--output-len", "5", "--concurrency", "2", "--goodput", "ttft:5000", "--cache-memory", "8MiB",
                 "--save", str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png")])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["completed"] == 4 and result["total_output_tokens"] == 20
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "ttfvt_ms"):
        assert all(v is not None and v >= 0 for v in result[key].values()), key
    for key in ("request_throughput", "output_throughput", "total_token_throughput", "goodput", "duration_s"):
        assert result[key] > 0
    local = result["local"]
    assert local["peak_rss_bytes"] > 0 and local["memory_plan"] == "resident"
    for key in ("gb_read_per_token", "expert_hit_rate", "read_bytes_per_s", "wait_seconds"):
        assert local[key] is not None
    saved = json.loads((tmp_path / "r.json").read_text())
    assert len(saved["requests"]) == 4 and (tmp_path / "p.png").stat().st_size > 1000


def test_local_context_sweep_with_streamed_experts(tiny_checkpoint, capsys):
    from k3.config import load_config
    from k3.streaming import plan_memory

    p = plan_memory(load_config(tiny_checkpoint), 10 ** 12, state_bytes=8 * 2 ** 20)
    budget = p.trunk_bytes + p.state_bytes + 4 * p.expert_bytes
    assert main(["bench", "--json", "--model", str(tiny_checkpoint), "--workload", "context-sweep", "--contexts", "8,32,64",
                 "--per-context", "1", "--output-len", "4", "--concurrency", "1", "--cache-memory", "8MiB",
                 "--memory-budget", str(budget)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(int(c) for c in result["by_context"]) == [8, 32, 64]
    assert result["local"]["memory_plan"] == "stream-experts" and result["local"]["gb_read_per_token"] > 0


def test_a_saved_result_reads_with_vllm_key_names(tiny_checkpoint, tmp_path, capsys):
    """`vllm bench serve`'s flat keys, with the same meanings as k3's nested ones."""
    code = main(["bench", "--model", str(tiny_checkpoint), "--dataset-name", "random", "--num-prompts", "3",
                 "--input-len", "7", "--output-len", "4", "--cache-memory", "8MiB", "--save-result",
                 "--result-dir", str(tmp_path / "out"), "--result-filename", "run.json"])
    assert code == 0
    r = json.loads((tmp_path / "out" / "run.json").read_text())
    assert r["completed"] == r["num_prompts"] == 3 and r["duration"] == r["duration_s"] > 0
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        assert r[key] > 0, key
    for name in ("ttft", "tpot", "itl", "e2el"):
        assert r[f"mean_{name}_ms"] == r[f"{name}_ms"]["mean"]
        assert r[f"median_{name}_ms"] == r[f"{name}_ms"]["p50"]
        assert r[f"p99_{name}_ms"] == r[f"{name}_ms"]["p99"]
        assert r[f"mean_{name}_ms"] > 0 and r[f"std_{name}_ms"] >= 0
    assert r["backend"] == "k3" and r["model_id"] == tiny_checkpoint.name and r["date"]


def test_base_url_and_endpoint_path_mean_what_they_mean_in_vllm():
    from k3.cli.bench import endpoint_target
    from k3.cli.main import build_parser

    def target(*argv):
        return endpoint_target(build_parser().parse_args(["bench", *argv]))

    assert target("--base-url", "http://h:8000", "--endpoint", "/v1/completions") == ("http://h:8000", "completions")
    assert target("--base-url", "http://h:8000", "--endpoint", "/v1/chat/completions") == ("http://h:8000", "chat")
    assert target("--base-url", "http://h:8000") == ("http://h:8000", "chat")
    assert target("--endpoint", "http://h:8000/v1", "--api", "completions") == ("http://h:8000/v1", "completions")
    for bad in (["--endpoint", "/v1/completions"], ["--model", "m", "--base-url", "http://h"],
                ["--base-url", "http://h", "--endpoint", "/v1/embeddings"]):
        with pytest.raises(ValueError):
            target(*bad)


def test_local_run_with_speculative_decoding_reports_acceptance(tiny_checkpoint, capsys):
    spec = '{"method": "draft_model", "model": "%s", "num_speculative_tokens": 3}' % tiny_checkpoint
    code = main(["bench", "--json", "--model", str(tiny_checkpoint), "--num-prompts", "2", "--input-len", "9",
                 "--output-len", "12", "--cache-memory", "8MiB", "--speculative-config", spec])
    assert code == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert result["completed"] == 2 and result["total_output_tokens"] == 24
    local = result["local"]
    assert local["spec_acceptance_rate"] == 1.0 and local["spec_drafted_tokens"] > 0
    report = captured.out + captured.err
    assert "speculative acceptance" in report and "100.0%" in report
