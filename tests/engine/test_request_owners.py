"""Each field of a Request has one writer (request.py's docstring names them): read off the engine's source,
so a second writer is a failing test rather than a review comment."""

from __future__ import annotations

import ast
from pathlib import Path

from k3.engine.request import Request, SamplingParams

ENGINE = Path(__file__).resolve().parents[2] / "src" / "k3" / "engine"
NAMES = {"req", "request"}                     # how the engine's code names a Request
OWNERS = {                                     # the step's output update is engine.py with its helper emit.py
    "scheduler": {"status", "num_computed", "last_scheduled", "resident_since", "prefix_cached", "snapshot_at",
                  "initial_state"},
    "output": {"output_ids", "all_ids", "logprobs", "prompt_logprobs", "first_token_time", "finish_reason", "error",
               "warning"},
    "drafter": {"draft_ids"},
}
MODULE_OWNER = {"scheduler.py": "scheduler", "engine.py": "output", "emit.py": "output", "request.py": "output",
                "drafter.py": "drafter"}


def _request_field(node) -> str | None:
    """X in req.X / request.X / <anything>.request.X (an attribute written or mutated)."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if not isinstance(node, ast.Attribute):
        return None
    base = node.value
    if (isinstance(base, ast.Name) and base.id in NAMES) or (isinstance(base, ast.Attribute) and base.attr == "request"):
        return node.attr
    return None


def _writes() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in ENGINE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                targets = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "append", "extend", "clear", "pop", "insert"):
                targets = [node.func.value]
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append_output"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in NAMES):
                found.setdefault("output_ids", set()).add(path.name)    # Request.append_output: output_ids, all_ids
            for t in targets:
                name = _request_field(t)
                if name is not None:
                    found.setdefault(name, set()).add(path.name)
    return found


def test_each_request_field_has_one_writer():
    writes = _writes()
    assert {"status", "num_computed", "output_ids", "draft_ids"} <= set(writes)
    problems = []
    for name, modules in sorted(writes.items()):
        owners = {MODULE_OWNER.get(m, m) for m in modules}
        expected = [o for o, fields in OWNERS.items() if name in fields]
        if len(owners) != 1 or owners != set(expected):
            problems.append(f"{name}: written in {sorted(modules)}, owner {expected}")
    assert not problems, problems


def test_the_token_list_is_kept_not_rebuilt():
    req = Request("r", [1, 2, 3], SamplingParams(), 0, 0)
    tokens = req.all_ids
    req.append_output(9)
    assert req.all_ids is tokens and tokens == [1, 2, 3, 9] and req.output_ids == [9]
