"""Verdicts the tested code cannot forge (issue 42): the check runs in the sandbox's judge process, the code in
its worker. Each attack here passed before: the nonce read from `__main__`, `os._exit(0)` at import, an
object equal to everything; and the check must not be readable from the worker by any route."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3.eval.sandbox import Limits, Sandbox
from k3.eval.tasks.code import check_in_sandbox
from k3.eval.tasks.humaneval import LIMITS
from sandbox_support import need_namespaces

SECRET = "K3_CHECK_MARKER_51f0c2"


@pytest.fixture(autouse=True)
def _namespaces():
    need_namespaces()


def test_nonce_from_main_and_exit_do_not_pass():
    forge = ("import sys, os, json\nmain = sys.modules.get('__main__')\n"
             "nonce = getattr(main, 'nonce', '')\n"
             "print('\\n' + str(nonce) + ' ' + json.dumps({'passes': True, 'runs': True}), flush=True)\nos._exit(0)\n")
    found = check_in_sandbox(forge, "assert add(1, 2) == 3", LIMITS, "namespaces")
    assert found["passes"] is False and found["runs"] is False, found


def test_an_object_equal_to_everything_does_not_pass():
    code = "class Any:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\ndef add(a, b):\n    return Any()\n"
    found = check_in_sandbox(code, "assert add(1, 2) == 3", LIMITS, "namespaces")
    assert found["runs"] is True and found["passes"] is False, found
    subclass = "class Int(int):\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Int(0)\n"
    assert check_in_sandbox(subclass, "assert add(1, 2) == 3", LIMITS, "namespaces")["passes"] is False


def test_a_correct_answer_passes_and_a_wrong_one_fails():
    assert check_in_sandbox("def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3", LIMITS, "namespaces")["passes"]
    assert not check_in_sandbox("def add(a, b):\n    return a - b\n", "assert add(1, 2) == 3", LIMITS, "namespaces")["passes"]


def test_exit_at_import_of_a_workspace_module_fails_the_hidden_check():
    with Sandbox(files={"calc.py": "import os\nos._exit(0)\n"}) as sb:
        r = sb.judge("from calc import add\nassert add(2, 3) == 5\n")
    assert r.verdict is not None and r.verdict["passes"] is False, r.verdict
    with Sandbox(files={"calc.py": "def add(a, b):\n    return a + b\n"}) as sb:
        r = sb.judge("from calc import add\nassert add(2, 3) == 5\n")
    assert r.verdict == {"passes": True, "error": "", "findings": {}, "runs": None}, r.verdict


def test_the_check_is_not_readable_from_the_worker():
    """The worker looks for the check's text in the judge's memory, command line, environment and fds, in its
    own memory (it is forked before the check is read) and in every file it can list."""
    probe = ("import os\nhits = []\nppid = os.getppid()\n"
             "for path in [f'/proc/{ppid}/{n}' for n in ('mem', 'cmdline', 'environ')] + ['/proc/self/cmdline']:\n"
             "    try:\n        data = open(path, 'rb').read(1 << 20)\n        hits.append((path, MARK in data))\n"
             "    except OSError as e:\n        hits.append((path, type(e).__name__))\n"
             "try:\n    fds = os.listdir(f'/proc/{ppid}/fd')\nexcept OSError as e:\n    fds = type(e).__name__\n"
             "own = 0\nfor line in open('/proc/self/maps'):\n"
             "    lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
             "    if 'r' not in line.split()[1]:\n        continue\n"
             "    try:\n        with open('/proc/self/mem', 'rb') as m:\n            m.seek(lo)\n            own += m.read(hi - lo).count(MARK)\n"
             "    except (OSError, ValueError, OverflowError):\n        pass\n"
             "seen = []\nfor top in ('/k3', '/workspace', '/tmp'):\n    for d, _, files in os.walk(top):\n"
             "        for f in files:\n            try:\n                seen.append(MARK in open(os.path.join(d, f), 'rb').read())\n"
             "            except OSError:\n                pass\n"
             "def look():\n    return repr((hits, fds, own, any(seen)))\n")
    code = f"MARK = {SECRET[::-1]!r}[::-1].encode()\n" + probe
    seen = {}
    for marked in (False, True):   # the worker's own needle is in its memory: compare against a check without it
        with Sandbox(Limits(wall_s=30, cpu_s=20)) as sb:
            r = sb.judge("raise AssertionError(look())\n" + (f"# {SECRET}\n" if marked else ""), answer=code)
        assert r.verdict is not None and r.verdict["runs"] is True, (r.verdict, r.summary())
        seen[marked] = r.verdict["error"]
    assert seen[True] == seen[False], seen
    assert "True" not in seen[True] and "'/proc/2/mem', 'PermissionError'" in seen[True], seen


def test_humaneval_helpers_come_from_the_prompt_not_the_answer():
    """HumanEval/32's test calls the prompt's `poly`: an answer that redefines it to always return 0 must not
    pass with a wrong root."""
    prompt = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\ndef find_zero(xs):\n    '''root'''\n"
    test = "def check(candidate):\n    assert abs(poly([-2, 1], candidate([-2, 1]))) < 1e-6\n\ncheck(find_zero)\n"
    cheat = prompt.split("def find_zero")[0].replace("return sum", "return 0 * sum") + "def find_zero(xs):\n    return 123.0\n"
    honest = prompt.split("def find_zero")[0] + "def find_zero(xs):\n    return 2.0\n"
    assert not check_in_sandbox(cheat, test, LIMITS, "namespaces", prelude=prompt, from_answer=("find_zero",))["passes"]
    assert check_in_sandbox(honest, test, LIMITS, "namespaces", prelude=prompt, from_answer=("find_zero",))["passes"]


def test_no_hidden_check_file_is_written_where_the_sandbox_sees_it(tmp_path):
    with Sandbox() as sb:
        sb.judge(f"# {SECRET}\nassert True\n")
        texts = [p.read_text(errors="replace") for p in Path(sb.control).iterdir() if p.is_file()]
    assert not any(SECRET in t for t in texts)
