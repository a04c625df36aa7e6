"""k3 check TASK... (--model PATH | --endpoint URL) --require "humaneval.pass@1>=0.8" "ttft.p90<=2s" ...

Does this machine (or this deployment) meet the bar? One run of a standard set through the model, every
call streamed and timed, scored by k3 eval's tasks on Inspect, then judged against the requirements on
each value's 95 % interval. Its own command rather than a mode of `k3 eval`: it has a verdict, and an exit
code to match (0 PASS, 1 FAIL, 2 a usage error, 3 INCONCLUSIVE: too few items to decide, 4 ERROR: the run
did not finish), where `k3 eval` reports scores and exits 0 when it ran."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from k3.cli.engine_args import add_engine_arguments, engine_config


EXIT = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3, "ERROR": 4}


def add_arguments(p) -> None:
    p.add_argument("task_names", nargs="*", metavar="TASK", help="tasks, as k3 eval takes them (humaneval, refusal, ...)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--model", help="a model reference, served in this process and measured over loopback")
    target.add_argument("--endpoint", help="OpenAI-compatible base URL (k3 serve, vLLM, SGLang, llama.cpp's server)")
    p.add_argument("--served-model-name", help="endpoint: model id to request (default: the first of /v1/models)")
    p.add_argument("--api-key")
    p.add_argument("--require", nargs="+", default=[], metavar="EXPR",
                   help='thresholds, e.g. "humaneval.pass@1>=0.8" "ttft.p90<=2s" "tpot.p50<=100ms" "peak_rss<=64GB"')
    p.add_argument("--requirements", metavar="FILE", help="thresholds from a file: one a line, or a JSON list")
    p.add_argument("-T", "--task-arg", action="append", default=[], metavar="KEY=VALUE", help="a task argument")
    p.add_argument("--limit", type=int, help="items per task, drawn across its classes")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=1024, help="per call")
    p.add_argument("--concurrency", type=int, default=1,
                   help="calls in flight at once (1: each request's own latency; --sweep finds how far load can go)")
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="answers with (or without) reasoning; default: the model's own")
    p.add_argument("--judge", metavar="URL", help="OpenAI-compatible endpoint of a judge model (refusal grading)")
    p.add_argument("--judge-model", help="the judge's model id (default: the first of its /v1/models)")
    p.add_argument("--judge-api-key")
    p.add_argument("--allow-dependent-judge", action="store_true",
                   help="run although the judge is the model under test; the verdict then says 'judge not independent'")
    p.add_argument("--sweep", metavar="KIND[=LEVELS]",
                   help="find the load where the bar stops holding: auto (GuideLLM-style: one at a time, all at once, "
                        "then 4 rates between; auto=N for N), concurrency=1,2,4,8 or rate=0.5,1,2 (requests/s); every "
                        "level is the whole set, scored and timed at that load")
    p.add_argument("--compare", metavar="TARGET",
                   help="run the same items against a second endpoint URL or model reference: paired score tests "
                        "(McNemar, paired bootstrap) and latencies side by side")
    p.add_argument("--compare-trunk", choices=["int8"],
                   help="with --compare MODEL: load the second model with its trunk quantised to int8 at load")
    p.add_argument("--plot", metavar="FILE.png", help="one page: latency and score against load, memory over time")
    p.add_argument("--log-dir", help="Inspect logs, k3's report and check.json (default check-runs/TIME)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line (last on stdout)")
    add_engine_arguments(p, local_only=True)


def run(args) -> int:
    from k3.cli.eval import _task_args
    from k3.eval.check import thresholds
    from k3.eval.check.report import table
    from k3.eval.check.run import Check, run as run_check, write
    from k3.eval.inspect import launch

    if not args.task_names:
        raise ValueError("name at least one task: k3 check humaneval --model default --require ...")
    if not (args.model or args.endpoint):
        raise ValueError("pass --model PATH (served here) or --endpoint URL (a server)")
    for flag, value in (("--concurrency", args.concurrency), ("--epochs", args.epochs)):
        if value < 1:
            raise ValueError(f"{flag} must be at least 1")
    requirements = thresholds.load(args.require, args.requirements)
    from k3.eval.check.sweep import parse
    from k3.eval.metrics import names

    for r in requirements:                                   # a name nothing would measure is refused now
        names.check(r.name, args.task_names, args.epochs, local=bool(args.model))

    steps = parse(args.sweep) if args.sweep else None        # refused before anything loads
    task_args = _task_args(args.task_arg)
    launch.precheck(args.task_names, task_args)
    out = args.log_dir or f"check-runs/{time.strftime('%Y%m%d-%H%M%S')}"
    engine = engine_config(args).settings() if args.model else {}
    judge = launch.judge(args.judge, args.judge_model, args.judge_api_key) if args.judge else None
    check = Check(args.task_names, args.endpoint, args.model, args.served_model_name, args.api_key, requirements,
                  args.limit, args.epochs, task_args, args.max_tokens, args.thinking, out, engine=engine,
                  max_connections=args.concurrency, judge=judge, dependent_judge=args.allow_dependent_judge)
    if args.plot:
        import matplotlib  # noqa: F401  (before the run: a missing [bench] extra is said at once)
    result = _run(args, check, run_check, steps)
    path = write(result, out)
    print(table(result))
    if args.plot:
        from k3.eval.check.plots import plot

        print(f"plots in {plot(args.plot, result)}")
    print(f"wrote {path} (Inspect logs in {out})")
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "items"}, default=str))
    return EXIT[result["verdict"]]


def _run(args, check, run_check, steps) -> dict:
    """The check; with --sweep, the load levels (under "sweep"), the lowest load's run being the check's result;
    with --compare, the second target's run and the comparison (under "compare"), the verdict the worse of
    the two."""
    from dataclasses import replace

    from k3.eval.check import run as runs
    from k3.eval.check import thresholds

    start = time.perf_counter()
    with runs.serve(check) as served:            # a model served here is loaded once for the sweep and the check
        if steps:
            from k3.eval.check.sweep import sweep as step_load

            sweep, result = step_load(check, *steps, served, run_check)
            result["sweep"] = sweep
        else:
            result = run_check(check, served)
    if args.compare:
        from k3.eval.check.paired import compare_latency, compare_scores

        remote = args.compare.startswith(("http://", "https://"))
        engine = {**check.engine, **({"trunk": args.compare_trunk} if args.compare_trunk else {})}
        other = run_check(replace(check, endpoint=args.compare if remote else None, model=None if remote else args.compare,
                                  served_model_name=None, log_dir=str(Path(check.log_dir) / "compare"), engine=engine))
        result["compare"] = {"target": other["target"], "verdict": other["verdict"], "measured": other["measured"],
                             "scores": compare_scores(result["items"], other["items"]),
                             "latency": compare_latency(result["speed"], other["speed"])}
        result["verdict"] = thresholds.worst(result["verdict"], other["verdict"])
    result["seconds"] = time.perf_counter() - start      # the whole check: sweep and comparison included
    return result
