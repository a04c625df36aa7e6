"""k3's report, derived from Inspect logs alone (so `k3 eval --report-from LOG...` rebuilds it from any
run): report.json, report.md and plots. For each task: k3's metrics (metrics/names.py), each with its n
and 95 % interval; Inspect's own metrics; the main score under both truncation views (a cut answer left
out, and counted as failed), rates by group with 95 % Wilson intervals (the group a k3 scorer names: a
refusal category, a constraint length, a challenge task), interventions by kind, tokens and time; what
went wrong (a task that did not finish, a judge that did not follow its rubric); the provenance k3 put in
the log heads it. Logs of one task made by different versions of it (their fingerprints differ) are
refused: their results are not comparable."""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

from inspect_ai.log import EvalLog, read_eval_log

from k3.eval.inspect import challenge_report
from k3.eval.inspect.interventions import interventions
from k3.eval.inspect.sample_scores import first_score, main_value, main_views, truncated
from k3.eval.metrics import quality
from k3.eval.prices import usage as token_usage
from k3.eval.stats import rate


def build(logs: list[EvalLog | str], prices: dict | None = None) -> dict:
    """`prices`: prices.load_prices' table, for the cost of each task (the judge's tokens included)."""
    logs = [_read(x) if isinstance(x, (str, Path)) else x for x in logs]
    _one_version_a_task(logs)
    first = logs[0].eval.metadata or {} if logs else {}
    tasks = [task_report(log, prices or {}) for log in logs]
    return {"provenance": first.get("k3", {}), "tasks": tasks, "problems": [p for t in tasks for p in t["problems"]]}


def _read(path) -> EvalLog:
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such log file (give the .eval or .json files Inspect wrote)")
    try:
        return read_eval_log(str(path))
    except Exception as e:     # Inspect raises a variety of errors for a file that is not its log
        raise ValueError(f"{path}: not an Inspect log ({type(e).__name__}: {str(e)[:200]})") from None


def _one_version_a_task(logs: list[EvalLog]) -> None:
    seen: dict[str, tuple[str, str]] = {}
    for log in logs:
        fingerprint = (log.eval.metadata or {}).get("fingerprint")
        if fingerprint is None:
            continue
        earlier = seen.setdefault(log.eval.task, (fingerprint, log.location))
        if earlier[0] != fingerprint:
            raise ValueError(f"{log.location} and {earlier[1]} hold {log.eval.task} at different versions (task "
                             f"fingerprints {fingerprint[:12]}... and {earlier[0][:12]}...): results of different "
                             "versions are not compared; report them apart")


def task_report(log: EvalLog, prices: dict | None = None) -> dict:
    samples = log.samples or []
    usage = token_usage(samples, prices or {})
    limits: dict[str, int] = defaultdict(int)
    for s in samples:
        if s.limit is not None:
            limits[s.limit.type] += 1
    found = interventions(log)
    by_kind: dict[str, int] = defaultdict(int)
    for i in found:
        by_kind[i["decision"]] += 1
    return {"task": log.eval.task, "log": log.location, "status": log.status, "model": log.eval.model,
            "task_args": log.eval.task_args, "metadata": {k: v for k, v in (log.eval.metadata or {}).items() if k != "k3"},
            "dataset": {"name": log.eval.dataset.name, "samples": log.eval.dataset.samples},
            "config": log.eval.config.model_dump(exclude_none=True),
            "generate": log.plan.config.model_dump(exclude_none=True) if log.plan else {},
            "error": log.error.message if log.error else None,
            "metrics": {k: v.to_dict() for k, v in quality.measures(log).items()},
            "inspect_metrics": _metrics(log), "main": main_views(samples), "groups": groups(samples),
            "problems": problems(log),
            "limits_hit": dict(limits), "interventions": {"total": len(found), "by_decision": dict(by_kind), "records": found},
            "usage": {**usage, "total_time_s": sum(s.total_time or 0 for s in samples),
                      "working_time_s": sum(s.working_time or 0 for s in samples)},
            **({"challenge": challenge_report.row(log, prices)} if challenge_report.is_challenge(log) else {})}


def problems(log: EvalLog) -> list[str]:
    """What keeps this log's numbers from being a result: the task did not finish, or a judge it used graded
    no answer by its rubric (every grading fell back to the rules)."""
    out = []
    if log.status != "success":
        out.append(f"{log.eval.task} ended {log.status}: {failure(log)}; its log keeps the finished samples "
                   f"(k3 eval --retry {log.location})")
    metas = [(first_score(s).metadata or {}) for s in log.samples or [] if first_score(s) is not None]
    tried = [m for m in metas if m.get("judge") is not None or m.get("judge_error")]
    failed = [m["judge_error"] for m in tried if m.get("judge_error")]
    if tried and len(failed) == len(tried):
        out.append(f"{log.eval.task}: the judge followed its rubric in none of {len(tried)} gradings (first: "
                   f"{failed[0]}); is it an instruction-following model? Its labels are not in the rates")
    return out


def failure(log: EvalLog) -> str:
    """What stopped a run, in words: the innermost exception's line (a retry that gave up names its last try)."""
    if not log.error:
        return "no error message"
    lines = [line.strip() for line in (log.error.traceback or "").splitlines()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Failed|Exception|Unavailable): ", line)
              and not re.match(r"^[\w.]*(RetryError|CancelledError)", line)]
    return raised[-1][:400] if raised else log.error.message[:400]


def _metrics(log: EvalLog) -> dict:
    if not log.results:
        return {}
    return {f"{s.name}" + (f" ({s.reducer})" if s.reducer and s.reducer != "mean" else ""):
            {k: m.value for k, m in s.metrics.items()} for s in log.results.scores}


def groups(samples) -> dict:
    """Rates of the main score by the group its scorer named (score metadata "group"), with Wilson intervals."""
    tally: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        sc = first_score(s)
        if sc is None or (sc.metadata or {}).get("group") is None or truncated(s):
            continue
        v = main_value(sc)
        if v is not None:
            tally[str(sc.metadata["group"])].append(v)
    return {g: rate(sum(v >= 1.0 for v in vs), len(vs)) for g, vs in tally.items()}


def write(report: dict, output: Path) -> list[Path]:
    """report.json and report.md (and plots) into `output`, each written whole, then renamed."""
    from k3.eval.inspect.report_md import markdown

    output.mkdir(parents=True, exist_ok=True)
    md = markdown(report, output)
    paths = []
    for name, text in (("report.json", json.dumps(report, indent=1, default=str)), ("report.md", md)):
        tmp = output / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, output / name)
        paths.append(output / name)
    return paths
