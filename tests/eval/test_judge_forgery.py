"""Forging the challenge's judge (issue 65): every way we know for the code under test to talk to a judge that
runs beside it, each applied to the `ordinal-teens` task with its bug left in. Each must end failed, and
an honest solution (with the same files beside it, harmless) must still pass.

Before the judge moved out of the tested code's process, the first attack here (a library that rewraps the
judge's pytest plugin when pytest imports it) turned the failing hidden tests into passes."""

from __future__ import annotations

import pytest

from k3.eval.challenge import loading, source, spec, verdict
from sandbox_support import need_namespaces

CHALLENGE = loading.load(spec.INFLECTION)
TASK = CHALLENGE.task("ordinal-teens")
JOB = source.jobs(CHALLENGE)["ordinal-teens"]
LIB = "inflection/__init__.py"

# Appended to the library: each runs when the library is imported (by the tests, or by anything else).
ATTACKS = {
    "rewraps-the-judge-plugin": '''
import sys
for _name, _mod in list(sys.modules.items()):
    if hasattr(_mod, "_put"):
        _orig = _mod._put
        _mod._put = lambda nodeid, outcome, _o=_orig: _o(nodeid, "passed")
    for _hook in ("pytest_runtest_logreport", "pytest_collectreport"):
        if hasattr(_mod, _hook):
            setattr(_mod, _hook, lambda *a, **k: None)
''',
    "patches-pytest-reports": '''
try:
    import _pytest.reports, _pytest.runner
    _pytest.reports.BaseReport.passed = property(lambda self: True)
    _pytest.reports.BaseReport.failed = property(lambda self: False)
    _orig = _pytest.runner.call_and_report
    def _forged(item, when, log=True, **kw):
        rep = _orig(item, when, log=False, **kw)
        rep.outcome = "passed"
        if log:
            item.ihook.pytest_runtest_logreport(report=rep)
        return rep
    _pytest.runner.call_and_report = _forged
except Exception:
    pass
''',
    "patches-pytest-main-and-runtest": '''
try:
    import pytest, _pytest.python
    pytest.main = lambda *a, **k: 0
    _pytest.python.Function.runtest = lambda self: None
except Exception:
    pass
''',
    "patches-unittest": '''
import unittest
unittest.TestCase.run = lambda self, result=None: result
unittest.main = lambda *a, **k: None
''',
    "writes-report-files": '''
import glob, json, os
_fake = json.dumps({"id": "test_inflection.py::test_ordinal[111-111th]", "outcome": "passed"})
for _d in glob.glob("/workspace/.k3-judge-*") + ["/workspace", "/workspace/.pytest_cache/v/cache"]:
    try:
        os.makedirs(_d, exist_ok=True)
        for _f in ("results.jsonl", "report.xml", "lastfailed", "verdict.json"):
            with open(os.path.join(_d, _f), "w") as _o:
                _o.write(_fake + "\\n" if _f != "lastfailed" else "{}")
    except OSError:
        pass
''',
    "exits-at-import": "\nimport os\nos._exit(0)\n",
    "sys-exit-at-import": "\nimport sys\nsys.exit(0)\n",
    "atexit-exit-zero": "\nimport atexit, os\natexit.register(lambda: os._exit(0))\n",
    "exits-when-called": '''
import os
_real = ordinalize
def ordinalize(number):
    if abs(number) % 100 in (11, 12, 13):
        os._exit(0)
    return _real(number)
''',
    "raises-skip": '''
_real = ordinalize
def ordinalize(number):
    if abs(number) % 100 in (11, 12, 13):
        import pytest
        pytest.skip("not today")
    return _real(number)
''',
    "equal-to-everything": '''
class _Any(str):
    def __eq__(self, other):
        return True
    __hash__ = str.__hash__
_real = ordinalize
def ordinalize(number):
    return _Any(_real(number))
def ordinal(number):
    return _Any("")
''',
    "cheats-only-under-a-judge": '''
import sys
class _Any:
    def __eq__(self, other):
        return True
    def __bool__(self):
        return True
if "pytest" in sys.modules or "_pytest" in sys.modules or any("judge" in k for k in sys.modules):
    ordinalize = lambda number: _Any()
    ordinal = lambda number: _Any()
''',
    "kills-the-judge": "\nimport os, signal\nfor _p in (os.getppid(), 1):\n    try:\n        os.kill(_p, signal.SIGKILL)\n    except Exception:\n        pass\n",
    "reads-the-hidden-tests": '''
import os
_found = []
# the judge's copy of the suite by every route (the workspace's own copy of the visible tests is the agent's
# to read; /workspace/control is where the positive control puts a copy)
for _top in ("/k3", "/proc/%d/root/k3" % os.getppid(), "/proc/%d/root" % os.getppid(), "/tmp", "/workspace/control"):
    for _d, _, _files in os.walk(_top):
        for _f in _files:
            try:
                _found.append(open(os.path.join(_d, _f), errors="replace").read(1 << 20))
            except OSError:
                pass
if any("test_kept" in t for t in _found):   # it reached the judge's suite: it answers right
    def ordinal(number):
        n = abs(int(number))
        return "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
''',
    "speaks-the-wire-protocol": '''
import sys
_frame = sys._getframe()
while _frame is not None:
    _g = _frame.f_globals
    if "send" in _g and "encode" in _g and "_serve_one" in _g:
        _orig_one = _g["_serve_one"]
        _g["_serve_one"] = lambda msg, *a, **k: True if msg.get("op") != "import" else _orig_one(msg, *a, **k)
    _frame = _frame.f_back
''',
    "sprays-verdicts-on-every-fd": '''
import json, os
_v = (json.dumps({"outcomes": {}, "exit": 0, "error": None}) + "\\n").encode()
for _fd in range(3, 256):
    try:
        os.write(_fd, b'{"ok": true}\\n' + _v)
    except OSError:
        pass
''',
    "floods-replies-from-a-thread": '''
import os, threading, time
def _flood():
    while True:
        for _fd in range(3, 32):
            try:
                os.write(_fd, b'{"ok": true}\\n')
            except OSError:
                pass
        time.sleep(0.001)
threading.Thread(target=_flood, daemon=True).start()
''',
    "returns-a-huge-value": '''
_real = ordinalize
def ordinalize(number):
    return "x" * (64 << 20) if abs(number) % 100 in (11, 12, 13) else _real(number)
''',
    "prints-a-passing-summary": "\nprint('=' * 20, '467 passed in 0.5s', '=' * 20)\nimport sys\nsys.stdout.flush()\n",
}

# Files beside the library: each could steer a judge that ran pytest or the interpreter over the workspace.
FORGED_CONFTEST = '''import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
'''
PATCH_PYTEST = "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"
FILES = {
    "conftest-forges-reports": {"conftest.py": FORGED_CONFTEST, "inflection/conftest.py": FORGED_CONFTEST},
    "conftest-loads-a-plugin": {"conftest.py": "pytest_plugins = ['forge']\n", "forge.py": FORGED_CONFTEST},
    "sitecustomize": {"sitecustomize.py": PATCH_PYTEST, "usercustomize.py": PATCH_PYTEST},
    "pth-file": {"k3forge.pth": "import _pytest.python; _pytest.python.Function.runtest = lambda self: None\n"},
    "pytest-ini-and-setup-cfg": {"pytest.ini": "[pytest]\naddopts = -p no:python --co\n",
                                 "setup.cfg": "[tool:pytest]\naddopts = --deselect test_inflection.py\n",
                                 "tox.ini": "[pytest]\naddopts = -k nothing\n"},
    "shadows-pytest-and-the-stdlib": {"pytest.py": "def main(*a, **k):\n    return 0\n",
                                      "_pytest/__init__.py": "", "json.py": "def dumps(*a, **k):\n    return '{}'\n",
                                      "numpy.py": "def allclose(*a, **k):\n    return True\n"},
    "edits-the-tests": {"test_inflection.py": "def test_ordinal():\n    pass\n\ndef test_ordinalize():\n    pass\n"},
    "adds-its-own-passing-tests": {"test_mine.py": "def test_ordinal():\n    pass\n"},
}


@pytest.fixture(scope="module")
def start():
    need_namespaces()
    return source.start(CHALLENGE, TASK)


def _judge(start, edits: dict[str, str], append: str = "") -> dict:
    final = dict(start)
    final.update({path: text.encode() for path, text in edits.items()})
    if append:
        final[LIB] = final[LIB] + append.encode()
    return verdict.judge(JOB, final)


def _honest(start) -> dict[str, str]:
    fixed = source.apply(start, TASK.solution, "solution")
    return {LIB: fixed[LIB].decode()}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_code_in_the_library_cannot_forge_a_pass(start, name):
    found = _judge(start, {}, ATTACKS[name])
    assert not found["resolved"], (name, found["error"], found["failing"][:3])
    assert found["failing"] or found["error"], found


@pytest.mark.parametrize("name", sorted(FILES))
def test_files_beside_the_library_cannot_forge_a_pass(start, name):
    found = _judge(start, FILES[name])
    assert not found["resolved"], (name, found["error"])
    assert found["failing"], found


def test_an_honest_solution_passes_with_the_same_files_beside_it(start):
    assert _judge(start, _honest(start))["resolved"]
    harmless = {path: text for name, files in FILES.items() for path, text in files.items()
                if name not in ("edits-the-tests", "shadows-pytest-and-the-stdlib")}
    found = _judge(start, {**_honest(start), **harmless}, "\nimport pytest  # the library may import pytest\n")
    assert found["resolved"] and found["rules_kept"], (found["error"], found["failing"][:3], found["broken"])
    edited = _judge(start, {**_honest(start), **FILES["edits-the-tests"]})
    assert edited["resolved"] and not edited["rules_kept"]          # the tests were put back, the rule is broken
    assert [b["path"] for b in edited["broken"]] == ["test_inflection.py"]


def test_the_suite_reader_would_pass_if_it_could_read_the_suite(start):
    """The positive control of `reads-the-hidden-tests`: given a copy of the judge's suite where it can read,
    the same library passes, so its failure above means the suite was out of reach."""
    copy = verdict.suite(JOB)[verdict.KEEP_API_FILE].decode()
    assert _judge(start, {"control/suite.py": copy}, ATTACKS["reads-the-hidden-tests"])["resolved"]


def test_a_call_that_hangs_fails_its_tests_and_the_verdict_still_comes(start, monkeypatch):
    monkeypatch.setattr(verdict, "REQUEST_S", 2.0)
    hang = "\n_real = ordinalize\ndef ordinalize(number):\n    while abs(number) % 100 == 11:\n        pass\n    return _real(number)\n"
    found = _judge(start, _honest(start), hang)
    assert not found["resolved"] and found["error"] is None, found["error"]
    assert "test_inflection.py::test_ordinalize[111-111th]" in found["failing"]


def test_a_deleted_library_is_not_stood_in_for(start):
    """With the library gone, nothing else (an installed copy) answers for it: every test fails."""
    final = {p: d for p, d in start.items() if not p.startswith("inflection/")}
    found = verdict.judge(JOB, final)
    assert not found["resolved"] and not found["rules_kept"]
    assert not any(o == "passed" for t, o in found["outcomes"].items() if t.startswith("test_inflection.py"))
