"""A task's verdict, taken after the agent has finished and apart from its sandbox, by a judge the code under
test cannot reach.

A fresh sandbox holds the task's starting repository plus the agent's changes (less its changes to
protected paths, which are put back and recorded as broken rules). The suite is the challenge's own:
the starting repository's test files, the hidden tests and the public-API test, never a file the agent
wrote. It runs under pytest in the sandbox's judge process (sandbox/pytest_judge.py), where only the
judge may read it; every module of the repository is a proxy to a worker process that holds the
agent's code, and only plain data comes back from it. So the agent's code never runs where the
outcomes are taken: a conftest, a `.pth`, a patched pytest, a rewrapped plugin, a report file or an
exit code are all in the worker's process or workspace, where the verdict is not. Each test's outcome
is read by exact test id; the tests that must pass are known before the agent starts. The diff is kept
with every verdict, for the person who reads a surprising pass."""

from __future__ import annotations

import difflib
import hashlib

from k3.eval.challenge.spec import Challenge, ChallengeError, Task
from k3.eval.sandbox import Limits, Sandbox
from k3.eval.sandbox.paths import printable

LIMITS = Limits(wall_s=300.0, cpu_s=300, memory_bytes=2 << 30, processes=64, output_bytes=1 << 20)
REQUEST_S = 60.0     # seconds the code under test has for one call before it is stopped (its later tests fail)
MAX_DIFF = 200_000   # characters of diff kept in a verdict

KEEP_API = '''import importlib
import pytest

@pytest.mark.parametrize("module,name", {pairs!r})
def test_kept(module, name):
    assert callable(getattr(importlib.import_module(module), name, None)), f"{{module}}.{{name}} is gone"
'''
KEEP_API_FILE = "test_k3_keep_api.py"


def changed(start: dict[str, bytes], final: dict[str, bytes]) -> list[str]:
    """Paths added, changed or deleted, sorted (raw: printable() them to show)."""
    return sorted(p for p in start.keys() | final.keys() if start.get(p) != final.get(p))


def diff(start: dict[str, bytes], final: dict[str, bytes]) -> str:
    out = []
    for path in changed(start, final):
        a, b = (t.get(path, b"").decode("utf-8", "replace").splitlines(True) for t in (start, final))
        out += difflib.unified_diff(a, b, f"a/{printable(path)}", f"b/{printable(path)}")
    text = "".join(out)
    return text if len(text) <= MAX_DIFF else text[:MAX_DIFF] + f"\n[diff cut at {MAX_DIFF} characters]\n"


def library(challenge: Challenge, start: dict[str, bytes], final: dict[str, bytes]):
    """-> (the repository the worker holds: the agent's, with protected paths as they started, and the rules
    broken [{rule, path}])."""
    tree, broken = dict(final), []
    for path in changed(start, final):
        rules = [r.text for r in challenge.rules if r.protects(path)]
        if not rules:
            continue
        broken += [{"rule": text, "path": printable(path)} for text in rules]
        if path in start:
            tree[path] = start[path]
        else:
            tree.pop(path, None)
    return tree, broken


def suite(challenge: Challenge, task: Task, start: dict[str, bytes]) -> dict[str, bytes]:
    """The tests the judge runs: the starting repository's test files (as the challenge shipped them, never
    the agent's), the task's hidden tests, and the public-API test."""
    tests = {p: data for p, data in start.items() if challenge.is_test(p)}
    tests.update({rel: src.encode() for rel, src in task.hidden_tests.items()})
    pairs = [[m, n] for r in challenge.rules for m, names in r.keep_api.items() for n in names]
    if pairs:
        tests[KEEP_API_FILE] = KEEP_API.format(pairs=pairs).encode()
    return tests


def modules(challenge: Challenge, task: Task, start: dict[str, bytes]) -> list[str]:
    """The repository's top-level module names, which the judge takes from the worker: the challenge's list,
    else every top-level module or package of the starting repository or the reference solution."""
    if challenge.modules:
        return list(challenge.modules)
    found = set()
    for path in {*start, *(e.file for e in task.solution)}:
        top, _, rest = path.partition("/")
        if challenge.is_test(path) or path in ("setup.py", "conftest.py"):
            continue
        if not rest and top.endswith(".py"):
            found.add(top[:-3])
        elif rest == "__init__.py":
            found.add(top)
    return sorted(n for n in found if n.isidentifier())


def judge(challenge: Challenge, task: Task, start: dict[str, bytes], final: dict[str, bytes],
          limits: Limits = LIMITS) -> dict:
    """{"resolved", "rules_kept", "broken", "failing", "outcomes", "error", "diff"}: `failing` lists the
    required tests (required() on the starting repository) that did not pass, or never ran."""
    need = required(challenge, task, start, limits)
    tree, broken = library(challenge, start, final)
    outcomes, error = run_tests(tree, suite(challenge, task, start), modules(challenge, task, start), limits)
    failing = sorted(t for t in need if outcomes.get(t) != "passed")
    broken += [{"rule": "keep the public API", "path": t} for t in failing if t.startswith(KEEP_API_FILE)]
    return {"resolved": not failing and error is None, "rules_kept": not broken, "broken": broken,
            "failing": failing, "outcomes": outcomes, "error": error, "diff": diff(start, final)}


_required: dict[tuple, list[str]] = {}


def required(challenge: Challenge, task: Task, start: dict[str, bytes], limits: Limits = LIMITS) -> list[str]:
    """The test ids that must pass: every one a fail-to-pass prefix names, and (pass-to-pass) those that
    passed on the starting repository with the hidden tests added, all of them for "*". Taken by running
    the starting repository once a process: a test the agent's code hides from collection then counts as
    failed, never as absent. A fail-to-pass prefix that matches no test, or no failing one, is the
    challenge's fault."""
    key = (str(challenge.directory), task.id, hashlib.sha256(repr(sorted(start.items())).encode()).hexdigest())
    if key not in _required:
        base, error = run_tests(start, suite(challenge, task, start), modules(challenge, task, start), limits)
        if error is not None:
            raise ChallengeError(f"{challenge.name}/{task.id}: the starting repository's tests did not run: {error}")
        for prefix in task.fail_to_pass:
            if not any(matches(prefix, t) and o != "passed" for t, o in base.items()):
                raise ChallengeError(f"{challenge.name}/{task.id}: no test {prefix} fails on the starting repository")
        wanted = {t for t in base if any(matches(p, t) for p in task.fail_to_pass)}
        kept = {t for t, o in base.items() if o == "passed" and t not in wanted and
                ("*" in task.pass_to_pass or any(matches(p, t) for p in (*task.pass_to_pass, KEEP_API_FILE)))}
        _required[key] = sorted(wanted | kept)
    return _required[key]


def run_tests(tree: dict[str, bytes], tests: dict[str, bytes], names: list[str],
              limits: Limits) -> tuple[dict[str, str], str | None]:
    """The suite `tests` in the judge of a fresh sandbox whose workspace holds `tree` -> ({test id: outcome},
    an error that stopped the run or None). A test's outcome is its worst report."""
    with Sandbox(limits) as box:
        for rel, data in tree.items():
            box.write_file(rel, data)
        r = box.judge_tests(tests, names, REQUEST_S)
    v = r.verdict
    if v is None:
        why = f"ran past {limits.wall_s:g} s" if r.timed_out else f"ended without a verdict (exit {r.exit_code})"
        return {}, f"the judged run {why}: {(r.stderr or r.stdout)[-300:]}"
    outcomes = {str(k): str(o) for k, o in (v.get("outcomes") or {}).items()}
    if v.get("error"):
        return outcomes, f"the judge's pytest failed: {v['error']}"
    if not outcomes:
        return outcomes, f"pytest reported no test (exit {v.get('exit')}): {(r.stdout or r.stderr)[-300:]}"
    return outcomes, None


def matches(prefix: str, test_id: str) -> bool:
    return test_id == prefix or test_id.startswith((prefix + "[", prefix + "::"))
