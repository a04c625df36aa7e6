"""The static rule checks a challenge applies to what an agent added (challenge/rules.py): only new code
counts, and each check names the file and the fault."""

from __future__ import annotations

from k3.eval.challenge import rules
from k3.eval.challenge.spec import Rule

BEFORE = {"lib/core.py": b"import numpy as np\n\n\ndef old(x):\n    return np.sum(x)\n",
          "tests/test_core.py": b"from lib.core import old\n\n\ndef test_old():\n    assert old([1]) == 1\n"}


def is_test(path: str) -> bool:
    return path.startswith("tests/")


def _check(rule: Rule, changes: dict[str, bytes]) -> list[dict]:
    return rules.check([rule], BEFORE, {**BEFORE, **changes}, is_test, {"lib"})


def test_imports_flags_only_new_outside_modules():
    rule = Rule("no new dependencies", check="imports", allowed=("numpy",))
    assert _check(rule, {"lib/new.py": b"import os\nimport numpy\nfrom lib import core\n"}) == []
    found = _check(rule, {"lib/new.py": b"import scipy.linalg\nfrom requests import get\n"})
    assert [(b["path"], b["why"]) for b in found] == [("lib/new.py", "imports requests"), ("lib/new.py", "imports scipy")]


def test_documented_and_tested():
    rule = Rule("docstrings and tests", check="documented_and_tested")
    code = b'def old(x):\n    return x\n\n\ndef shiny(x):\n    return x\n\n\nclass Box:\n    """A box."""\n\n    def fill(self):\n        """Fill it."""\n'
    found = {b["why"] for b in _check(rule, {"lib/core.py": code})}
    assert found == {"shiny has no docstring", "shiny is named in no test", "Box is named in no test",
                     "Box.fill is named in no test"}
    tested = {"tests/test_new.py": b"from lib.core import Box, shiny\n\ndef test_it():\n    Box().fill(); shiny(1)\n"}
    assert {b["why"] for b in _check(rule, {"lib/core.py": code, **tested})} == {"shiny has no docstring"}


def test_naming_checks_new_names_only():
    rule = Rule("names", check="naming")
    assert _check(rule, {"lib/core.py": BEFORE["lib/core.py"] + b"\nLIMIT = 3\n\n\ndef add_one(value):\n    out = value + 1\n    return out\n"}) == []
    found = _check(rule, {"lib/x.py": b"class my_thing:\n    pass\n\n\ndef doIt(Value):\n    newName = Value\n    return newName\n"})
    assert {b["why"] for b in found} == {"class my_thing", "function doIt", "argument Value", "variable newName"}


def test_a_file_that_does_not_parse_breaks_no_rule():
    assert _check(Rule("names", check="naming"), {"lib/core.py": b"def broken(:\n"}) == []
