"""k3 check TASK... (--model PATH | --endpoint URL) --require "humaneval.pass@1>=0.8" "ttft.p90<=2s" ...

Does this machine (or this deployment) meet the bar? One run of a standard set through the model, every
call streamed and timed, scored by k3 eval's tasks on Inspect, then judged against the requirements. Its
own command rather than a mode of `k3 eval`: it has a verdict, and an exit code to match (0 PASS, 1 FAIL),
where `k3 eval` reports scores and exits 0 when it ran."""

from __future__ import annotations

import argparse
import json
import time

from k3.cli.trunk_arg import add_trunk_argument


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
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="answers with (or without) reasoning; default: the model's own")
    p.add_argument("--cache-memory", default="1GiB", help="--model: sequence-state cache")
    p.add_argument("--memory-budget", help="--model: weights + cache budget (streams what does not fit)")
    add_trunk_argument(p)
    p.add_argument("--log-dir", help="Inspect logs, k3's report and check.json (default check-runs/TIME)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line (last on stdout)")


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
    requirements = thresholds.load(args.require, args.requirements)
    task_args = _task_args(args.task_arg)
    launch.precheck(args.task_names, task_args)
    out = args.log_dir or f"check-runs/{time.strftime('%Y%m%d-%H%M%S')}"
    llm_kwargs = {"cache_memory": args.cache_memory, "memory_budget": args.memory_budget, "trunk": args.trunk}
    check = Check(args.task_names, args.endpoint, args.model, args.served_model_name, args.api_key, requirements,
                  args.limit, args.epochs, task_args, args.max_tokens, args.thinking, out, llm_kwargs=llm_kwargs)
    result = run_check(check)
    path = write(result, out)
    print(table(result))
    print(f"wrote {path} (Inspect logs in {out})")
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "items"}, default=str))
    return 0 if result["verdict"] == "PASS" else 1



