"""One metric naming scheme (issue 65): every metric name the docs show is one `k3 check` takes, and one the
code measures: each task is run once with a scripted model, and its log's metrics hold every name the
scheme gives it (pass@K and pass^K with two attempts). The names table in the check guide is generated
from the scheme."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from inspect_ai import eval as inspect_eval  # noqa: E402

from inspect_support import always  # noqa: E402
from k3.eval.check import thresholds  # noqa: E402
from k3.eval.metrics import names, quality  # noqa: E402
from sandbox_support import need_namespaces  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# TASK.METRIC or LATENCY.STAT; not a file name (challenge.json)
NAME = re.compile(r"\b((?:%s)\.(?:pass[@^][0-9K]+|(?!json\b|jsonl\b|py\b|md\b|yaml\b)[a-z_][a-z0-9_]*))(?![\w@^])"
                  % "|".join([*names.TASKS, *names.LATENCIES]))


def documented() -> set[str]:
    """Every TASK.METRIC or latency name written in the README and the docs."""
    found = set()
    for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        found |= set(NAME.findall(path.read_text()))
    return found


def test_every_documented_name_is_one_check_takes():
    shown = documented()
    assert {"humaneval.pass@1", "refusal.under_refusal", "ttft.p90", "challenge.pass^K"} <= shown, sorted(shown)
    for name in sorted(shown):
        concrete = name.replace("K", "2")
        names.check(concrete, list(names.TASKS), epochs=10, local=True)


def test_every_documented_requirement_parses():
    texts = [p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]]
    given = [r for t in texts for r in re.findall(r'"([a-z_.@^0-9]+\s*(?:<=|>=|==|<|>)\s*[0-9.]+\s*[A-Za-z]*)"', t)]
    assert len(given) >= 8, given
    for text in given:
        r = thresholds.parse(text)
        names.check(r.name, list(names.TASKS), epochs=10, local=True)


def _runs(tmp_path):
    """Each task once with a scripted model: a log per task."""
    from k3.eval.inspect.bfcl import bfcl
    from k3.eval.inspect.challenge import challenge
    from k3.eval.inspect.constraints import constraints
    from k3.eval.inspect.grading import grading
    from k3.eval.inspect.harmful import harmful
    from k3.eval.inspect.refusal import refusal
    from k3.eval.inspect.tasks import code, humaneval

    tasks = {"refusal": refusal(limit=4), "harmful": harmful(limit=2), "humaneval": humaneval(limit=1, epochs=2),
             "code": code(limit=1), "bfcl": bfcl(limit=1, steps=1), "constraints": constraints(lengths="1024", per_length=1),
             "challenge": challenge(path="inflection", tasks="ordinal-teens", epochs=2, turns=1), "grading": grading(limit=3)}
    for name, task in tasks.items():
        [log] = inspect_eval(task, model=always("I'm sorry, but I can't help with that."), log_dir=str(tmp_path / name),
                             display="none")
        assert log.status == "success", (name, log.error)
        yield name, log


def test_every_name_of_the_scheme_is_measured(tmp_path):
    need_namespaces()
    for task, log in _runs(tmp_path):
        measured = quality.measures(log)
        epochs = 2 if task in ("humaneval", "challenge") else 1
        want = {f"{task}.{m}" for m in names.task_metrics(task, epochs)}
        assert want <= set(measured), (task, sorted(want - set(measured)))
        assert all(m.n >= 0 and m.kind in ("rate", "mean") for m in measured.values())
        assert len(log.eval.metadata["fingerprint"]) == 64, task           # every task's log has its fingerprint
