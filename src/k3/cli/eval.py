"""k3 eval TASK... (--model PATH | --endpoint URL): Inspect AI's eval() with k3's tasks, sandbox and report.

TASK: challenge, refusal, harmful, humaneval, code, constraints, bfcl (k3's; NAME:PATH for a data file of your
own), or any Inspect task (FILE.py@name, a registry name). Every run writes Inspect logs (`inspect view`
opens them) and k3's report.md/report.json, derived from those logs, into --log-dir; the last stdout
line is a JSON summary. --report-from LOG... rebuilds the report from logs without running anything."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from k3.cli.engine_args import add_engine_arguments, engine_config

DEFAULT_MAX_TOKENS = 32768


def add_arguments(p) -> None:
    p.add_argument("task_names", nargs="*", metavar="TASK", help="tasks to run (see above)")
    p.add_argument("--tasks", help="comma-separated tasks (the same as listing them)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--model", help="checkpoint directory (or `default`): evaluate it in-process")
    target.add_argument("--endpoint", help="OpenAI-compatible base URL (k3 serve, vLLM, SGLang, a hosted API)")
    target.add_argument("--solver", choices=("reference", "nothing", "cheat"),
                        help="challenge only: a scripted agent instead of a model (no model or endpoint needed)")
    p.add_argument("--list", action="store_true", help="challenge only: print its tasks, each prompt's sha256 and "
                                                       "the challenge version, and run nothing")
    p.add_argument("--leaderboard", nargs="+", metavar="LOG",
                   help="only build the challenge leaderboard from these logs or log directories")
    p.add_argument("--retry", nargs="+", metavar="LOG",
                   help="resume runs that stopped (a killed process, a dead endpoint): their finished samples are "
                        "kept, the rest run again (Inspect's eval-retry), and the report is rebuilt")
    p.add_argument("--served-model-name", "--model-name", dest="model_name",
                   help="endpoint: model id to request (default: the first of /v1/models)")
    p.add_argument("--api-key")
    p.add_argument("-T", "--task-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="a task argument (repeatable), e.g. -T tasks=ordinal-teens or -T path=mine.jsonl")
    p.add_argument("--limit", type=int, help="items per task, drawn across its classes and lengths (k3's tasks)")
    p.add_argument("--epochs", type=int, default=1, help="repeats of each item: pass@k and pass^k for k <= epochs")
    p.add_argument("--judge", metavar="URL", help="OpenAI-compatible endpoint of a judge model (Inspect's grader role)")
    p.add_argument("--judge-model", help="the judge's model id (default: the first of its /v1/models)")
    p.add_argument("--judge-api-key")
    p.add_argument("--allow-dependent-judge", action="store_true",
                   help="run although the judge is the model under test (the same server, or the same weights "
                        "fingerprint); every report then says 'judge not independent'")
    p.add_argument("--approval", help="Inspect approval: `human`, or a policy file (k3/scripted rules, see the guide)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help=f"per turn; default {DEFAULT_MAX_TOKENS:,} (generous: reasoning models), or half the model's "
                        "context when that is smaller (read from the model or the server); truncation is reported")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-retries", type=int, default=3,
                   help="tries again for a call that fails (a dropped connection, a server error); a task whose calls "
                        "keep failing ends in error, reported, rather than waiting on a dead endpoint")
    p.add_argument("--prices", help="JSON price table {model: {input, output}} in USD per million tokens: cost in the report")
    p.add_argument("--log-dir", default=None, help="Inspect logs and k3's report (default eval-runs/TIME)")
    p.add_argument("--report-from", nargs="+", metavar="LOG", help="only rebuild the report from these Inspect logs")
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="answers with (or without) reasoning; default: the model's own default (on for K3)")
    p.add_argument("--no-progress", action="store_true")
    add_engine_arguments(p, local_only=True)


def run(args) -> int:
    from k3.eval.inspect import report as reports
    from k3.eval.prices import load_prices

    prices = load_prices(args.prices)
    out = Path(args.log_dir or f"eval-runs/{time.strftime('%Y%m%d-%H%M%S')}")
    if args.leaderboard:
        return _leaderboard(args.leaderboard, prices, out if args.log_dir else None)
    if args.retry:
        return _retry(args.retry, out, prices, args)
    if args.report_from:
        report = reports.build(args.report_from, prices)
        paths = reports.write(report, out)
        print(f"wrote {', '.join(map(str, paths))}")
        print(json.dumps(_summary(report, paths)))
        return 0
    tasks = list(args.task_names) + [t.strip() for t in (args.tasks or "").split(",") if t.strip()]
    if not tasks:
        raise ValueError("name at least one task: k3 eval challenge refusal ... (see k3 eval --help)")
    if args.list or args.solver:
        if tasks != ["challenge"]:
            raise ValueError("--list and --solver are for the challenge alone: k3 eval challenge --list")
        if args.list:
            return _list(_task_args(args.task_arg).get("path"))
    if not (args.model or args.endpoint or args.solver):
        raise ValueError("pass --model PATH (in-process) or --endpoint URL (a server)")
    for name, value, least in (("--limit", args.limit, 1), ("--epochs", args.epochs, 1), ("--max-retries", args.max_retries, 0)):
        if value is not None and value < least:
            raise ValueError(f"{name} must be at least {least}")
    from inspect_ai.model import GenerateConfig

    from k3.eval.inspect import launch

    task_args = _task_args(args.task_arg)
    launch.precheck(tasks, task_args)
    target = _target(args)
    max_tokens = _max_tokens(args.max_tokens, target.context)
    run = launch.Run(tasks, target, judge=_judge(args), task_args=task_args, limit=args.limit,
                     epochs=args.epochs, approval=args.approval, log_dir=str(out), progress=not args.no_progress, prices=prices,
                     config=GenerateConfig(max_tokens=max_tokens, temperature=args.temperature, seed=args.seed,
                                           max_retries=args.max_retries),
                     dependent_judge=args.allow_dependent_judge)
    logs, report, paths = launch.run(run)
    for problem in report["problems"]:
        print(f"k3 eval: {problem}", file=sys.stderr)
    print(f"wrote {', '.join(map(str, paths))} (Inspect logs in {out}: inspect view --log-dir {out})")
    print(json.dumps(_summary(report, paths)))
    return 1 if report["problems"] else 0


def _target(args):
    from k3.eval.inspect import launch

    if args.solver:
        return launch.scripted(args.solver, _task_args(args.task_arg).get("path"))
    if args.model:
        return launch.local(args.model, engine_config(args), thinking=args.thinking)
    return launch.endpoint(args.endpoint, args.model_name, args.api_key, thinking=args.thinking)


def _retry(logs: list[str], out: Path, prices: dict, args) -> int:
    from inspect_ai import eval_retry

    from k3.eval.inspect import registry  # noqa: F401  (k3's tasks, sandbox and providers, by name)
    from k3.eval.inspect import report as reports

    for log in logs:
        if not Path(log).is_file():
            raise ValueError(f"--retry {log}: no such log file (give the .eval files a stopped run wrote)")
    # An endpoint's model is rebuilt from the log, which keeps its URL but never its key.
    os.environ.setdefault("K3_API_KEY", args.api_key or "none")
    done = eval_retry(logs, log_dir=str(out), max_retries=args.max_retries,
                      display="none" if args.no_progress else "rich")
    report = reports.build(done, prices)
    paths = reports.write(report, out)
    for problem in report["problems"]:
        print(f"k3 eval: {problem}", file=sys.stderr)
    print(f"wrote {', '.join(map(str, paths))} (Inspect logs in {out})")
    print(json.dumps(_summary(report, paths)))
    return 1 if report["problems"] else 0


def _list(path: str | None) -> int:
    from k3.eval.challenge import __main__ as challenge_cli
    from k3.eval.challenge import loading, spec

    from k3.eval.inspect.challenge import SCORER_FILES

    ch = loading.load(spec.locate(path))
    fingerprint = ch.fingerprint(SCORER_FILES)      # as the run's log will hold it
    challenge_cli.print_list(ch, fingerprint)
    print(json.dumps({"challenge": ch.label, "fingerprint": fingerprint,
                      "tasks": [{"id": t.id, "kind": t.kind, "chain": t.chain, "step": t.step or None,
                                 "prompt_sha256": ch.prompt_sha256(t)} for t in ch.every_task]}))
    return 0


def _leaderboard(paths: list[str], prices: dict, out: Path | None) -> int:
    from k3.eval.inspect import challenge_report

    boards = challenge_report.leaderboard(paths, prices)
    text = challenge_report.markdown(boards)
    print(text)
    if out is not None:
        from k3.checkpoint.writer import atomic_write_text

        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "leaderboard.md", text)
    print(json.dumps({"leaderboard": {k: [{c: r[c] for c in r if c != "rows"} for r in rows]
                                      for k, rows in boards.items()}}, default=str))
    return 0


def _max_tokens(asked: int | None, max_model_len: int | None) -> int:
    """The per-turn budget: what was asked, else 32,768 within half the model's context (a server refuses
    a request whose prompt and max_tokens exceed it)."""
    if asked is not None:
        if asked < 1:
            raise ValueError("--max-tokens must be at least 1")
        return asked
    return DEFAULT_MAX_TOKENS if not max_model_len else min(DEFAULT_MAX_TOKENS, max_model_len // 2)


def _judge(args):
    from k3.eval.inspect import launch

    return launch.judge(args.judge, args.judge_model, args.judge_api_key) if args.judge else None


def _task_args(pairs: list[str]) -> dict:
    """KEY=VALUE -> {KEY: VALUE}, the value read as JSON when it is (numbers, true/false), else as text."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"-T {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _summary(report: dict, paths) -> dict:
    judge = report.get("provenance", {}).get("judge") or {}
    return {"report": str(paths[-1]), "problems": report["problems"],
            **({"judge_not_independent": judge["why"]} if judge.get("independent") is False else {}),
            "tasks": [{"task": t["task"], "log": t["log"], "status": t["status"],
                       "score": t["main"]["excluding_truncated"],
                       "score_truncated_as_failed": t["main"]["truncated_as_failed"],
                       "truncated": t["main"]["truncated"],
                       "metrics": {k: {"value": m["value"], "n": m["n"]} for k, m in t["metrics"].items()}}
                      for t in report["tasks"]]}
