"""Does the code a model writes run? (the `k3/code` task and HumanEval's checks). For an answer: take the first fenced code block of the answer,
then, in the sandbox, check that it parses, that its imports and the module attributes it uses exist,
that every function it calls by name is defined, imported or built in, that it runs, and that a
hidden test passes."""

from __future__ import annotations

import re
from pathlib import Path

from k3.eval.sandbox import Limits, Sandbox
from k3.eval.tasks.code_checker import empty_result

FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
CHECKER = Path(__file__).with_name("code_checker.py")
STAGES = ("has_code", "parses", "imports_exist", "attributes_exist", "calls_defined", "runs", "passes")


def extract_code(answer: str) -> str | None:
    m = FENCE.search(answer)
    return m.group(1) if m else None


def check_in_sandbox(code: str, test: str, limits: Limits, isolation: str, prelude: str = "",
                     from_answer: tuple[str, ...] = ()) -> dict:
    """Judge `code` against `test` in a fresh sandbox -> code_checker's findings plus runs, passes and error.

    The test runs in the sandbox's judge process, the code in its worker (sandbox/judge.py): the code cannot
    read the test, print a verdict, or end the process with a pass; `prelude` is trusted source the test
    may use (a HumanEval prompt's helpers), run in the judge, except the names in `from_answer`."""
    with Sandbox(limits, isolation=isolation) as sb:
        r = sb.judge(test, answer=code, prelude=prelude, from_answer=from_answer, checker=CHECKER)
    v = r.verdict
    if v is None:
        return empty_result("the judge gave no verdict (the run was killed at a limit): " + r.summary(300))
    found = v.get("findings") if isinstance(v.get("findings"), dict) else {}
    out = empty_result(str(v.get("error", ""))[:300])
    out["parses"] = found.get("parses") is True
    for key in ("missing_imports", "missing_attributes", "undefined_calls"):
        value = found.get(key)
        out[key] = [str(x) for x in value][:100] if isinstance(value, list) else []
    out["runs"], out["passes"] = v.get("runs") is True, v.get("passes") is True
    return out



def stages(found: dict) -> dict:
    """check_in_sandbox's findings -> each stage passed or not, in order (a later stage needs the earlier)."""
    imports = found["parses"] and not found["missing_imports"]
    return {"has_code": True, "parses": found["parses"], "imports_exist": imports,
            "attributes_exist": imports and not found["missing_attributes"],
            "calls_defined": found["parses"] and not found["undefined_calls"], "runs": found["runs"],
            "passes": found["passes"]}
