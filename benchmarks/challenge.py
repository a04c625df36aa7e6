"""The sim3d agent challenge run whole by the three scripted agents (reference, do-nothing, cheat) and, with
--model, by a model in-process on the first --model-limit samples: the leaderboard those runs make (read
from their logs, as `k3 eval --leaderboard` reads them), each task's time split into sandbox start, agent
and judge (reference run, one task at a time), and the challenge's size. The reference must solve every task and the other
two none; the script exits 1 otherwise.

    .venv/bin/python benchmarks/challenge.py [--model default --model-limit 3 --turns 4]

Prints the leaderboard and the time table, then one JSON line (with date, commit and command).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from inspect_ai import eval as inspect_eval

from k3.eval.challenge import source, spec
from k3.eval.inspect import challenge_report, launch
from k3.eval.inspect.challenge import challenge
from k3.eval.inspect.provenance import provenance

AGENTS = {"reference": 1.0, "nothing": 0.0, "cheat": 0.0}     # the score each scripted agent must get


def size(ch: spec.Challenge) -> dict:
    tree = source.pristine(ch)
    code = [p for p in tree if p.endswith(".py") and not ch.is_test(p)]
    tests = [p for p in tree if ch.is_test(p) and p.endswith(".py")]
    hidden = list(ch.hidden_tests.values()) + [v for t in ch.every_task for v in t.hidden_tests.values()]
    return {"files": len(tree), "code_lines": sum(tree[p].count(b"\n") for p in code),
            "test_lines": sum(tree[p].count(b"\n") for p in tests), "hidden_test_lines": sum(h.count("\n") for h in hidden),
            "tasks": len(ch.every_task), "bugs": sum(t.kind == "bug" for t in ch.tasks),
            "features": sum(t.kind == "feature" for t in ch.tasks), "chain_steps": sum(len(c.steps) for c in ch.chains)}


def run(model, log_dir: str, max_samples: int | None = None, **task_args) -> tuple[object, float]:
    t0 = time.perf_counter()
    [log] = inspect_eval(challenge(**task_args), model=model, log_dir=log_dir, display="none", max_samples=max_samples)
    return log, time.perf_counter() - t0


def timings(rows: list[dict]) -> dict:
    """Median and worst seconds per task (a chain counts once) of each part."""
    out = {}
    for part in ("sandbox_start_s", "agent_s", "judge_s"):
        values = [r[part] for r in rows if r.get(part) is not None]
        out[part] = {"median": round(statistics.median(values), 3), "max": round(max(values), 3)} if values else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="also run this checkpoint in-process (e.g. default)")
    ap.add_argument("--model-limit", type=int, default=3)
    ap.add_argument("--turns", type=int, default=4)
    args = ap.parse_args()
    ch = spec.load(spec.BUNDLED)
    runs, ok = [], True
    for name, want in AGENTS.items():
        # the reference one task at a time, so its per-task times are not shared with other tasks' on 2 cores
        log, wall = run(launch.scripted(name).model, tempfile.mkdtemp(), 1 if name == "reference" else None)
        row = challenge_report.row(log)
        ok &= log.status == "success" and row["completed"] == want * len(ch.every_task)
        runs.append({**row, "wall_s": round(wall, 1)})
    if args.model:
        model = launch.local(args.model).model
        log, wall = run(model, tempfile.mkdtemp(), limit=args.model_limit, turns=args.turns)
        runs.append({**challenge_report.row(log), "wall_s": round(wall, 1)})
    boards = {f"{ch.label} {runs[0]['fingerprint'][:12]}": runs}
    print(challenge_report.markdown(boards))
    reference = runs[0]["rows"]
    times = timings(reference)
    print(f"{'part of a task':<22}{'median s':>10}{'max s':>10}")
    for part, t in times.items():
        print(f"{part:<22}{t['median']:>10.2f}{t['max']:>10.2f}")
    p = provenance(None)
    print(json.dumps({"bench": "challenge", "date": p["date"], "commit": p["k3_commit"], "cpu": p["hardware"]["cpu"],
                      "command": " ".join(["benchmarks/challenge.py", *sys.argv[1:]]), "challenge": ch.label,
                      "size": size(ch), "task_seconds": times, "scripted_agents_ok": ok,
                      "runs": [{k: v for k, v in r.items() if k not in ("rows", "log")} for r in runs],
                      "reference_tasks": reference}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
