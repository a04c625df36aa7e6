"""What the eval harness itself costs, side by side in one run:

  sandbox: one `run_python` (spawn, lock-down, run, collect, namespace torn down) with every layer, with
           the kernel layers only (no audit hook), one judged check (`Sandbox.judge`: worker and judge),
           and a bare `python -I -c pass` for the interpreter's own start-up;
  agent:   seconds per agent task with a scripted model that solves it (sandbox + hidden check; no
           model time), over the 11 built-in tasks;
  local:   items/s of `refusal` on the bundled default model at --max-tokens 32 (model time included).

    .venv/bin/python benchmarks/eval_harness.py [--runs 20]

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "eval"))

from agent_solutions import SOLUTIONS  # noqa: E402
from fake_models import SolvesAgentTasks  # noqa: E402

from k3.defaults import default_model  # noqa: E402
from k3.eval.backends.local import LocalBackend  # noqa: E402
from k3.eval.registry import make_tasks  # noqa: E402
from k3.eval.runner import run_eval  # noqa: E402
from k3.eval.sandbox import Sandbox  # noqa: E402
from k3.eval.tasks.base import Settings  # noqa: E402


def per_run(fn, runs: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - t0) / runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--refusal-items", type=int, default=20)
    args = ap.parse_args()
    out: dict = {}
    with Sandbox() as full, Sandbox(audit_hook=False) as kernel:
        out["sandbox_full_s"] = per_run(lambda: full.run_python("pass"), args.runs)
        out["sandbox_kernel_only_s"] = per_run(lambda: kernel.run_python("pass"), args.runs)
        out["isolation"] = full.run_python("pass").layers
        if hasattr(full, "judge"):   # a verdict from the judge process (issue 42); absent before it
            out["sandbox_judge_s"] = per_run(lambda: full.judge("assert True"), args.runs)
    out["bare_python_s"] = per_run(lambda: subprocess.run([sys.executable, "-I", "-c", "pass"], check=True), args.runs)
    settings = Settings(max_tokens=32)
    t0 = time.perf_counter()
    report = run_eval(SolvesAgentTasks(SOLUTIONS), make_tasks("agent", settings), settings, Path(tempfile.mkdtemp()),
                      progress=False)
    agent = report["tasks"]["agent"]
    out["agent_task_s"] = (time.perf_counter() - t0) / agent["items"]
    out["agent_success"] = agent["scores"]["success"]["rate"]
    backend = LocalBackend(default_model(), cache_memory="64MiB")
    t0 = time.perf_counter()
    report = run_eval(backend, make_tasks("refusal", settings), settings, Path(tempfile.mkdtemp()),
                      limit=args.refusal_items, progress=False)
    out["local_refusal_items_per_s"] = args.refusal_items / (time.perf_counter() - t0)
    out["local_refusal_truncated"] = report["tasks"]["refusal"]["scores"]["truncated"]
    print(f"{'what':<44}{'value':>12}")
    print(f"{'sandbox run, all layers (ms)':<44}{out['sandbox_full_s'] * 1e3:>12.1f}")
    print(f"{'sandbox run, kernel layers only (ms)':<44}{out['sandbox_kernel_only_s'] * 1e3:>12.1f}")
    if "sandbox_judge_s" in out:
        print(f"{'judged check, worker + judge (ms)':<44}{out['sandbox_judge_s'] * 1e3:>12.1f}")
    print(f"{'bare python -I -c pass (ms)':<44}{out['bare_python_s'] * 1e3:>12.1f}")
    print(f"{'agent task, scripted solver (s)':<44}{out['agent_task_s']:>12.2f}")
    print(f"{'refusal items/s, default model, 32 tokens':<44}{out['local_refusal_items_per_s']:>12.2f}")
    print(f"isolation: {', '.join(out['isolation'])}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
