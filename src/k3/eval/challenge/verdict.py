"""A task's verdict, taken after the agent has finished and apart from its sandbox: a fresh sandbox holds the
task's starting repository plus the agent's changes, less every change to a protected path (the tests, by
the rules) or a file that steers pytest (conftest.py, pytest.ini, ...), which are put back as they were;
the hidden tests are added; pytest runs there, and each test's outcome comes from a plugin the judge
writes, by exact test id (never from the run's exit code or output, which the agent's code could write).

What it does not stop: code of the agent's that pytest imports runs in pytest's process and could reach
the plugin. The diff is kept with every verdict, for the person who reads a surprising pass."""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import secrets
import sys

from k3.eval.challenge.spec import Challenge, ChallengeError, Task
from k3.eval.sandbox import Limits, Sandbox
from k3.eval.sandbox.paths import printable

# Files that change how pytest or the interpreter runs, whoever wrote them: the judge keeps the starting ones.
STEERING = ("conftest.py", "*/conftest.py", "pytest.ini", "*/pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml",
            "*.pth", "sitecustomize.py", "*/sitecustomize.py", "usercustomize.py", "*/usercustomize.py")
LIMITS = Limits(wall_s=300.0, cpu_s=300, memory_bytes=2 << 30, processes=64, output_bytes=1 << 20)
MAX_DIFF = 200_000   # characters of diff kept in a verdict

PLUGIN = '''import json
_out = open({results!r}, "a", encoding="utf-8")

def _put(nodeid, outcome):
    _out.write(json.dumps({{"id": nodeid, "outcome": outcome}}) + "\\n")
    _out.flush()

def pytest_collectreport(report):
    if not report.passed:
        _put(report.nodeid, "error" if report.failed else "skipped")

def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _put(report.nodeid, "passed" if report.passed else "skipped" if report.skipped else "failed")
'''

KEEP_API = '''import importlib
import pytest

@pytest.mark.parametrize("module,name", {pairs!r})
def test_kept(module, name):
    assert callable(getattr(importlib.import_module(module), name, None)), f"{{module}}.{{name}} is gone"
'''
KEEP_API_FILE = "test_k3_keep_api.py"
# pytest started by the judge: its plugin and ini first on the path, the repository's own config ignored.
# The environment's pytest plugins stay out (they cost seconds a run, and none of them is the challenge's).
QUIET = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
SHADOWED = {"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "k3_judge_plugin"}
BOOT = ("import sys; sys.path.insert(0, '{home}'); import pytest; sys.path.insert(1, '/workspace'); "
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'k3_judge_plugin', '-c', '{home}/pytest.ini', "
        "'--rootdir', '/workspace', '/workspace']))")


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


def judged_tree(challenge: Challenge, task: Task, start: dict[str, bytes], final: dict[str, bytes]):
    """-> (the tree to test, rules broken [{rule, path}], steering changes left out [path])."""
    tree, broken, steering = dict(start), [], []
    for path in changed(start, final):
        rules = [r.text for r in challenge.rules if r.protects(path)]
        broken += [{"rule": text, "path": printable(path)} for text in rules]
        if rules or _steers(path):
            steering += [] if rules else [printable(path)]
            continue
        if path in final:
            tree[path] = final[path]
        else:
            tree.pop(path, None)
    tree.update({rel: src.encode() for rel, src in task.hidden_tests.items()})
    pairs = [[m, n] for r in challenge.rules for m, names in r.keep_api.items() for n in names]
    if pairs:
        tree[KEEP_API_FILE] = KEEP_API.format(pairs=pairs).encode()
    return tree, broken, steering


def _steers(path: str) -> bool:
    """A pytest or interpreter setting, or a new top-level module that would shadow one pytest imports."""
    top = path.removesuffix(".py") if path.endswith(".py") and "/" not in path else None
    return any(fnmatch.fnmatch(path, g) for g in STEERING) or top in SHADOWED or top in sys.stdlib_module_names


def judge(challenge: Challenge, task: Task, start: dict[str, bytes], final: dict[str, bytes],
          limits: Limits = LIMITS) -> dict:
    """{"resolved", "rules_kept", "broken", "steering", "failing", "outcomes", "error", "diff"}: `failing`
    lists the required tests (required() on the starting repository) that did not pass, or never ran."""
    need = required(challenge, task, start, limits)
    tree, broken, steering = judged_tree(challenge, task, start, final)
    outcomes, error = run_tests(tree, limits)
    failing = sorted(t for t in need if outcomes.get(t) != "passed")
    broken += [{"rule": "keep the public API", "path": t} for t in failing if t.startswith(KEEP_API_FILE)]
    return {"resolved": not failing and error is None, "rules_kept": not broken, "broken": broken,
            "steering": steering, "failing": failing, "outcomes": outcomes, "error": error,
            "diff": diff(start, final)}


_required: dict[tuple, list[str]] = {}


def required(challenge: Challenge, task: Task, start: dict[str, bytes], limits: Limits = LIMITS) -> list[str]:
    """The test ids that must pass: every one a fail-to-pass prefix names, and (pass-to-pass) those that
    passed on the starting repository with the hidden tests added, all of them for "*". Taken by running
    the starting repository once a process: a test the agent's code hides from collection then counts as
    failed, never as absent. A fail-to-pass prefix that matches no test, or no failing one, is the
    challenge's fault."""
    key = (str(challenge.directory), task.id, hashlib.sha256(repr(sorted(start.items())).encode()).hexdigest())
    if key not in _required:
        base, error = run_tests(judged_tree(challenge, task, start, start)[0], limits)
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


def run_tests(tree: dict[str, bytes], limits: Limits) -> tuple[dict[str, str], str | None]:
    """pytest over `tree` in a fresh sandbox -> ({test id: outcome}, an error that stopped the run or None).
    A test's outcome is its worst report (a passing call with a failing teardown failed)."""
    home = f".k3-judge-{secrets.token_hex(8)}"
    with Sandbox(limits) as box:
        for rel, data in tree.items():
            box.write_file(rel, data)
        box.write_file(f"{home}/k3_judge_plugin.py", PLUGIN.format(results=f"/workspace/{home}/results.jsonl"))
        box.write_file(f"{home}/pytest.ini", "[pytest]\naddopts =\n")
        r = box.exec(["python", "-I", "-c", BOOT.format(home=f"/workspace/{home}")], env=QUIET)
        try:
            lines = box.read_bytes(f"{home}/results.jsonl", limits.file_bytes).decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            lines = []
    outcomes: dict[str, str] = {}
    for row in (json.loads(line) for line in lines):
        if outcomes.get(row["id"], "passed") == "passed":
            outcomes[row["id"]] = row["outcome"]
    if r.timed_out:
        return outcomes, f"the tests ran past {limits.wall_s:g} s"
    if not outcomes:
        return outcomes, f"pytest reported no test (exit {r.exit_code}): {(r.stderr or r.stdout)[-300:]}"
    return outcomes, None


def matches(prefix: str, test_id: str) -> bool:
    return test_id == prefix or test_id.startswith((prefix + "[", prefix + "::"))
