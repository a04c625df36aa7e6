"""`k3 check` against scripted streaming endpoints with a known latency and known answers: the measured
figures are the scripted ones, the verdict flips exactly at the thresholds, and the exit code follows it;
then a real run with the bundled model served in-process, with its peak memory."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from k3.cli.main import main  # noqa: E402
from k3.eval.check import thresholds  # noqa: E402
from k3.eval.check.run import Check, run  # noqa: E402
from scripted_stream import streaming_endpoint  # noqa: E402

REFUSES = "I'm sorry, but I can't help with that request at all."     # 11 words: 11 chunks


@pytest.fixture(scope="module")
def slow_refuser(tmp_path_factory):
    """First chunk after 0.3 s, then a chunk every 20 ms: TTFT 0.3 s, TPOT 20 ms, end-to-end 0.5 s."""
    with streaming_endpoint(lambda messages: REFUSES, first=0.3, gap=0.02) as url:
        result = run(Check(["refusal"], endpoint=url, limit=4, log_dir=str(tmp_path_factory.mktemp("check"))))
        yield url, result


def test_the_measured_figures_are_the_scripted_ones(slow_refuser):
    _, r = slow_refuser
    m = r["measured"]
    assert r["speed"]["completed"] == 4 and r["speed"]["failed"] == 0
    # at least the scripted waits; a loaded 2-core machine sleeps longer, never shorter
    assert 0.3 <= m["ttft.p50"] < 0.6 and 0.02 <= m["tpot.p50"] < 0.06 and 0.5 <= m["e2el.p50"] < 1.2
    assert m["refusal.over_refusal"] == 1.0 and m["refusal.under_refusal"] == 0.0    # it refuses everything
    assert "peak_rss" not in m                           # a remote endpoint: no process memory to read
    item = r["items"][0]
    assert item["task"] == "refusal" and item["calls"] == 1 and item["output_tokens"] == 11
    assert 0.3 <= item["ttft_s"] < 0.6 and item["score"] in (0.0, 1.0)


@pytest.mark.parametrize("name", ["ttft.p90", "tpot.p50", "e2el.p99", "refusal.over_refusal", "refusal.score"])
def test_the_verdict_flips_exactly_at_the_threshold(slow_refuser, name):
    _, r = slow_refuser
    value = r["measured"][name]
    at = thresholds.Requirement(name, "<=", value, f"{name}<={value}")
    below = thresholds.Requirement(name, "<=", value * (1 - 1e-9) - 1e-12, f"{name}<=less")
    above = thresholds.Requirement(name, ">=", value, f"{name}>={value}")
    rows = thresholds.judge([at, below, above], r["measured"])
    assert [row["status"] for row in rows] == ["PASS", "FAIL", "PASS"]


def test_requirements_are_read_with_their_units():
    r = {q.name: q.value for q in thresholds.load(['ttft.p90<=2s', 'tpot.p50<=100ms', 'peak_rss<=64GB',
                                                   'humaneval.pass@1>=0.8', 'e2el.mean < 1500 ms'], None)}
    assert r == {"ttft.p90": 2.0, "tpot.p50": 0.1, "peak_rss": 64e9, "humaneval.pass@1": 0.8, "e2el.mean": 1.5}
    for bad, message in [("ttft.p90<=2GB", "a time takes s or ms"), ("ttft.p90 about 2", "expected NAME OP VALUE"),
                         ("refusal.score>=0.5s", "plain number")]:
        with pytest.raises(ValueError, match=message):
            thresholds.parse(bad)


def test_the_command_exits_with_its_verdict(slow_refuser, tmp_path, capsys):
    url, _ = slow_refuser
    common = ["check", "refusal", "--endpoint", url, "--limit", "2", "--log-dir", str(tmp_path), "--json"]
    assert main([*common, "--require", "ttft.p90<=2s", "refusal.under_refusal<=0.1"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["verdict"] == "PASS" and "PASS" in out and (tmp_path / "check.json").is_file()
    assert main([*common, "--require", "ttft.p90<=100ms"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert main([*common, "--require", "peak_rss<=64GB"]) == 1          # not measurable remotely: a failure
    assert "MISSING" in capsys.readouterr().out
    (tmp_path / "bar.txt").write_text("# the deployment bar\nttft.p90 <= 2s\n")
    assert main([*common, "--requirements", str(tmp_path / "bar.txt")]) == 0


def test_a_local_model_is_served_here_and_its_memory_measured(tmp_path, capsys):
    argv = ["check", "refusal", "--model", "default", "--limit", "3", "--max-tokens", "8", "--cache-memory", "64MiB",
            "--log-dir", str(tmp_path), "--json", "--require", "peak_rss<=16GB", "tpot.p50<=10s"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["local"] and 10 ** 8 < result["measured"]["peak_rss"] < 16e9
    assert result["provenance"]["model_fingerprint"] and result["speed"]["completed"] == 3
