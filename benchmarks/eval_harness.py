"""What the eval harness itself costs, side by side in one run:

  sandbox:   a fresh Sandbox (namespaces, tmpfs, cgroup) made and closed; one `exec` of /bin/true and one
             `run_python` in it; one judged check (worker + judge); a bare `python -I -c pass` for the
             interpreter's own start-up;
  challenge: seconds per inflection-challenge task through Inspect with the scripted reference agent
             (sandbox, checkout, the judge's two pytest runs; no model time);
  local:     the bundled default model through Inspect on `refusal` at --max-tokens 32, seconds per item,
             beside the same prompts straight through LLM.chat: the difference is the harness (a run's fixed
             cost apart from its cost per item).

    .venv/bin/python benchmarks/eval_harness.py [--runs 20] [--refusal-items 12]

Prints a table, then one JSON line (with date, commit and command).
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

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.model import get_model  # noqa: E402

from inspect_support import output  # noqa: E402
from k3.eval.inspect import launch  # noqa: E402
from k3.eval.inspect.challenge import challenge  # noqa: E402
from k3.eval.inspect.provenance import provenance  # noqa: E402
from k3.eval.inspect.refusal import refusal  # noqa: E402
from k3.eval.sandbox import Sandbox  # noqa: E402


def per_run(fn, runs: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - t0) / runs


def sandbox_costs(runs: int) -> dict:
    out = {"sandbox_make_close_s": per_run(lambda: Sandbox().close(), runs)}
    with Sandbox() as box:
        out["sandbox_exec_true_s"] = per_run(lambda: box.exec(["true"]), runs)
        out["sandbox_run_python_s"] = per_run(lambda: box.run_python("pass"), runs)
        out["sandbox_judge_s"] = per_run(lambda: box.judge("assert True"), runs)
    out["bare_python_s"] = per_run(lambda: subprocess.run([sys.executable, "-I", "-c", "pass"], check=True), runs)
    return out


def challenge_costs() -> dict:
    t0 = time.perf_counter()
    [log] = inspect_eval(challenge(path="inflection"), model=launch.scripted("reference", "inflection").model,
                         log_dir=tempfile.mkdtemp(), display="none")
    n = len(log.samples)
    return {"challenge_task_s": (time.perf_counter() - t0) / n,
            "challenge_passed": sum(s.scores["steps_judged"].value["passed"] for s in log.samples) / n}


def local_costs(items: int) -> dict:
    """The same prompts through Inspect (k3 provider) and straight through LLM.chat: Inspect runs `items` and
    3 x `items` prompts, so its fixed cost per run (task set-up, the log) parts from its cost per item."""
    from k3 import SamplingParams

    model = get_model("k3/default", cache_memory="64MiB", thinking=False, memoize=False)
    inspect_eval(refusal(limit=1), model=model, log_dir=tempfile.mkdtemp(), display="none", max_tokens=32)   # warm
    walls = {}
    for n in (items, 3 * items):
        t0 = time.perf_counter()
        inspect_eval(refusal(limit=n), model=model, log_dir=tempfile.mkdtemp(), display="none", max_tokens=32,
                     temperature=0.0)
        walls[n] = time.perf_counter() - t0
    params = SamplingParams(max_tokens=32, temperature=0.0)
    t0 = time.perf_counter()
    for sample in refusal(limit=3 * items).dataset:    # on the thread that built the model, as the provider runs
        model.api.thread.call(model.api.llm.chat, [{"role": "user", "content": sample.input}], params, thinking=False)
    direct = (time.perf_counter() - t0) / (3 * items)
    per_item = (walls[3 * items] - walls[items]) / (2 * items)
    return {"local_item_s": per_item, "local_direct_item_s": direct, "local_harness_item_s": per_item - direct,
            "local_harness_fixed_s": walls[items] - items * per_item}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--refusal-items", type=int, default=12)
    args = ap.parse_args()
    out = sandbox_costs(args.runs) | challenge_costs() | local_costs(args.refusal_items)
    rows = [("fresh sandbox, made and closed (ms)", out["sandbox_make_close_s"] * 1e3),
            ("exec /bin/true in it (ms)", out["sandbox_exec_true_s"] * 1e3),
            ("run_python 'pass' in it (ms)", out["sandbox_run_python_s"] * 1e3),
            ("judged check, worker + judge (ms)", out["sandbox_judge_s"] * 1e3),
            ("bare python -I -c pass (ms)", out["bare_python_s"] * 1e3),
            ("challenge task, scripted agent (s)", out["challenge_task_s"]),
            ("Inspect run's fixed cost, default model (s)", out["local_harness_fixed_s"]),
            ("refusal item, default model, 32 tokens (s)", out["local_item_s"]),
            ("  the same prompts straight through LLM.chat (s)", out["local_direct_item_s"]),
            ("  the harness's share of an item (s)", out["local_harness_item_s"])]
    print(f"{'what':<46}{'value':>12}")
    for what, value in rows:
        print(f"{what:<46}{value:>12.3f}")
    p = provenance(None)
    print(json.dumps({"bench": "eval_harness", "date": p["date"], "commit": p["k3_commit"], "cpu": p["hardware"]["cpu"],
                      "command": " ".join(["benchmarks/eval_harness.py", *sys.argv[1:]]), **out}))


if __name__ == "__main__":
    main()
