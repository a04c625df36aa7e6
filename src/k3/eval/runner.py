"""Runs tasks against a backend: cached answers first, the rest one item at a time (each saved as soon
as it is done, so an interrupted run resumes), then scores and reports."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from k3.eval.prices import cost
from k3.eval.report import headline, write_reports
from k3.eval.store import AnswerCache, item_key
from k3.eval.tasks.base import HARNESS_VERSION, Context, Settings
from k3.eval.tasks.data import builtin
from k3.eval.tasks.refusal_rules import check_judge_independent
from k3.tools.progress import count_progress


# The released content hash of each built-in task: a report says whether the prompts were the frozen ones.
FROZEN: dict[str, str] = json.loads(builtin("frozen.json").read_text())


def run_eval(backend, tasks: list, settings: Settings, output: Path, *, limit: int | None = None, judge=None,
             prices: dict | None = None, progress: bool = True, concurrency: int = 1) -> dict:
    """concurrency: items in flight at once (threads; for endpoints). Records keep item order, so the
    report does not depend on it."""
    output.mkdir(parents=True, exist_ok=True)
    if judge is not None:
        check_judge_independent(judge, backend)
    model = backend.identity()
    cache = AnswerCache(output / "answers.jsonl")
    ctx = Context(backend, settings, judge)
    keyed_settings = settings.to_dict() | {"judge": judge.identity() if judge else None}
    plan = [(t, t.items()[:limit] if limit else t.items()) for t in tasks]
    report = {"harness_version": HARNESS_VERSION, "model": model, "judge": keyed_settings["judge"],
              "settings": settings.to_dict(), "limit": limit, "tasks": {}}
    for task, items in plan:
        task_hash = task.fingerprint()
        keys = [item_key(task.name, task_hash, item["id"], keyed_settings, model) for item in items]
        with count_progress(task.name, len(items), enabled=None if progress else False) as tick:
            records = _run_items(task, items, keys, ctx, cache, tick, concurrency)
        report["tasks"][task.name] = _task_report(task, task_hash, records, model, prices or {})
    write_reports(report, output)
    return report


def _run_items(task, items: list[dict], keys: list[str], ctx: Context, cache: AnswerCache, advance,
               concurrency: int) -> list[dict]:
    """Cached records where the key matches; the rest run (in up to `concurrency` threads), each saved
    as soon as it finishes. A failure stops the task after the items already running finish."""
    records: list[dict | None] = [cache.get(k) for k in keys]
    for r in records:
        if r is not None:
            advance()
    lock = threading.Lock()

    def run(i: int) -> None:
        record = task.run(items[i], ctx)
        with lock:
            cache.put(keys[i], record)
            records[i] = record
            advance()

    todo = [i for i, r in enumerate(records) if r is None]
    if concurrency <= 1:
        for i in todo:
            run(i)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            futures = [pool.submit(run, i) for i in todo]
            try:
                for f in futures:
                    f.result()
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    return records


def _task_report(task, task_hash: str, records: list[dict], model: dict, prices: dict) -> dict:
    p = sum(r.get("prompt_tokens", 0) for r in records)
    c = sum(r.get("completion_tokens", 0) for r in records)
    frozen = FROZEN.get(task.name)
    return {"task_hash": task_hash, "frozen": None if frozen is None else frozen == task_hash, "items": len(records),
            "scores": task.summarise(records),
            "usage": {"prompt_tokens": p, "completion_tokens": c, "cost_usd": cost(model, p, c, prices)},
            "records": records}


def summary_line(report: dict, output: Path) -> dict:
    return {"model": report["model"].get("model"), "output": str(output),
            "scores": {name: headline(name, t["scores"]) for name, t in report["tasks"].items()},
            "cost_usd": _total_cost(report)}


def _total_cost(report: dict):
    costs = [t["usage"]["cost_usd"] for t in report["tasks"].values()]
    return None if any(c is None for c in costs) else sum(costs)
