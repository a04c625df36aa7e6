"""k3 eval (--model PATH | --endpoint URL) --tasks refusal,agent,code,constraints,mc:F,gen:F,perplexity:F
[--limit N] [--output DIR] [--judge URL --judge-model NAME] ... -- the last stdout line is a JSON summary."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from k3.cli.trunk_arg import add_trunk_argument


def add_arguments(p) -> None:
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--model", help="checkpoint directory with a tokenizer: evaluate it in-process")
    target.add_argument("--endpoint", help="OpenAI-compatible base URL (k3 serve, vLLM, SGLang, a hosted API)")
    p.add_argument("--tasks", required=True,
                   help="comma-separated: refusal, agent, code, constraints, humaneval, mc:FILE.jsonl, gen:FILE.jsonl, "
                        "perplexity:FILE.txt, refusal:FILE, humaneval:FILE.jsonl")
    p.add_argument("--limit", type=int, help="first N items of each task")
    p.add_argument("--output", help="report directory; rerunning with the same one resumes (default eval-runs/TIME)")
    p.add_argument("--served-model-name", "--model-name", dest="model_name",
                   help="endpoint: model id to request (default: the first of /v1/models); the same flag as "
                        "`k3 bench` and `k3 serve` (--model-name still works)")
    p.add_argument("--api-key")
    p.add_argument("--judge", metavar="URL", help="refusal: OpenAI-compatible endpoint of a judge model (a different model)")
    p.add_argument("--judge-model", help="the judge's model id (default: the first of its /v1/models)")
    p.add_argument("--judge-api-key")
    p.add_argument("--max-tokens", type=int, default=32768, help="per turn (generous: reasoning models; truncation is flagged)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--agent-steps", type=int, default=12, help="agent: model turns before the step limit")
    p.add_argument("--samples", type=int, default=1,
                   help="humaneval: answers per problem; pass@k is reported for k = 1, 10, 100 up to it")
    p.add_argument("--constraint-lengths", default="0,4,16,48", help="constraints: filler exchanges before the check")
    p.add_argument("--prices", help="JSON price table {model: {input, output}} in USD per million tokens")
    p.add_argument("--timeout", type=float, default=600.0, help="endpoint: seconds per request")
    p.add_argument("--concurrency", type=int, default=1, help="endpoint: items in flight at once (default 1)")
    p.add_argument("--memory-budget", help="local: weights + cache budget; experts, then layers, beyond it stream from disk")
    add_trunk_argument(p)
    p.add_argument("--cache-memory", default="1GiB", help="local: sequence-state cache")
    p.add_argument("--weak-sandbox", action="store_true",
                   help="agent/code: run model-written code without bubblewrap's namespaces (weaker; warns)")
    p.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    from k3.eval.backends.base import BackendError
    from k3.eval.prices import load_prices
    from k3.eval.registry import make_tasks
    from k3.eval.runner import run_eval, summary_line
    from k3.eval.tasks.base import Settings

    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be at least 1")
    if args.concurrency < 1 or (args.model and args.concurrency > 1):
        raise ValueError("--concurrency must be at least 1, and 1 with --model (the local engine runs one item at a time)")
    if args.samples < 1:
        raise ValueError("--samples must be at least 1")
    if args.samples > 1 and args.temperature == 0:
        raise ValueError(f"--samples {args.samples} at --temperature 0 draws the same answer {args.samples} times; "
                         "set a sampling temperature (0.8 is usual for pass@10)")
    lengths = tuple(int(x) for x in args.constraint_lengths.split(",") if x.strip())
    settings = Settings(args.max_tokens, args.temperature, args.seed, args.agent_steps, lengths, args.samples)
    tasks = make_tasks(args.tasks, settings, isolation="process" if args.weak_sandbox else "namespaces")
    prices = load_prices(args.prices)
    output = Path(args.output or f"eval-runs/{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        backend = _backend(args)
        judge = None
        if args.judge:
            from k3.eval.backends.openai import OpenAIBackend

            judge = OpenAIBackend(args.judge, args.judge_model, args.judge_api_key, args.timeout)
        report = run_eval(backend, tasks, settings, output, limit=args.limit, judge=judge, prices=prices,
                          progress=not args.no_progress, concurrency=args.concurrency)
    except BackendError as e:
        print(f"k3 eval: {e}", file=sys.stderr)
        if (output / "answers.jsonl").is_file():
            print(f"finished items are saved in {output}/answers.jsonl; rerun with --output {output} to resume",
                  file=sys.stderr)
        return 2
    print(f"wrote {output}/report.json and {output}/report.md")
    print(json.dumps(summary_line(report, output)))
    return 0


def _backend(args):
    if args.model:
        from k3.eval.backends.local import LocalBackend

        return LocalBackend(args.model, memory_budget=args.memory_budget, cache_memory=args.cache_memory, trunk=args.trunk)
    from k3.eval.backends.openai import OpenAIBackend

    return OpenAIBackend(args.endpoint, args.model_name, args.api_key, args.timeout)
