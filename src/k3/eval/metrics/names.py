"""The names a requirement, a report and the docs use, and what each measures. TASK is k3's short task name
(`refusal` for `refusal:FILE` too); K is 2..--epochs. Latencies are in seconds (a requirement may say ms);
memory in bytes. Checked before a run: a name nothing would measure is refused then, with the names
that exist, never found missing at the end."""

from __future__ import annotations

import difflib
import re

EVERY_TASK = {
    "score": "the task's main score: the share of answers right for the task, truncated ones counted as failed",
    "truncated": "the share of answers cut at the token limit",
}
PASSING = {
    "pass@1": "the share of attempts that passed (over items, each item's attempts averaged)",
    "pass@K": "the chance that at least one of K attempts passes (unbiased, over items; K <= --epochs)",
}
REFUSING = {
    "over_refusal": "safe prompts refused, fully or in part, of those answered (the judge's labels with --judge, else the rules')",
    "under_refusal": "prompts that should be refused, answered, of those answered (likewise)",
    "over_refusal_rules": "over-refusal by the rules' labels",
    "under_refusal_rules": "under-refusal by the rules' labels",
    "over_refusal_judge": "over-refusal by the judge's labels (--judge)",
    "under_refusal_judge": "under-refusal by the judge's labels (--judge)",
    "judge_agreement": "answers on which the rules' label equals the judge's, of those both graded",
    "judge_failed": "answers whose grading by the judge did not follow the rubric (they fall back to the rules)",
    "harm": "the judge's graded harm of answers to prompts that should be refused (StrongREJECT's 0-1 score)",
    "empty": "answers with no visible text (empty, filtered, failed): counted in no rate",
    "cut": "answers cut at the token limit: counted in no rate",
}
STAGES = ("has_code", "parses", "imports_exist", "attributes_exist", "calls_defined", "runs", "passes")
TASKS = {
    "challenge": EVERY_TASK | PASSING | {
        "pass^K": "the chance that all K attempts pass (over items; K <= --epochs)",
        "resolved": "attempts whose required tests all pass", "rules_kept": "attempts that kept every rule"},
    "humaneval": EVERY_TASK | PASSING,
    "code": EVERY_TASK | PASSING | {s: f"answers that reach the stage '{s}'" for s in STAGES},
    "bfcl": EVERY_TASK | PASSING,
    "constraints": EVERY_TASK | PASSING,
    "refusal": EVERY_TASK | REFUSING,
    "harmful": EVERY_TASK | {k: v for k, v in REFUSING.items() if not k.startswith("over_refusal")},   # unsafe only
    "grading": EVERY_TASK | {
        "judge_accuracy": "the judge's labels that are the person's (the model under test is the judge)",
        "rules_accuracy": "k3's rules' labels that are the person's, on the same answers",
        "judge_agreement": "answers on which the rules' label equals the judge's",
        "judge_failed": "replies of the judge that do not follow the rubric"},
}
LATENCIES = {"ttft": "time to first token", "ttfvt": "time to first visible token (after any reasoning)",
             "tpot": "time per output token after the first", "e2el": "end-to-end latency of a call",
             "itl": "gap between streamed chunks"}
STATISTICS = {"mean": None, "p50": 0.50, "p90": 0.90, "p99": 0.99}
MACHINE = {"output_throughput": "output tokens a second over the run",
           "failed": "calls that failed",
           "peak_rss": "the peak resident memory of this process, bytes (--model only)",
           "peak_gpu_memory": "the most GPU memory torch allocated, bytes (--model on a GPU only)"}
LOCAL_ONLY = ("peak_rss", "peak_gpu_memory")


def short(task: str) -> str:
    """`refusal:FILE` -> refusal; `k3/humaneval` -> humaneval; `FILE.py@name` -> name."""
    return task.partition(":")[0].split("@")[-1].split("/")[-1]


def task_metrics(task: str, epochs: int = 1) -> list[str]:
    """Every metric name of one task, K expanded to 2..epochs."""
    out = []
    for name in TASKS.get(short(task), EVERY_TASK):
        if "K" in name:
            out += [name.replace("K", str(k)) for k in range(2, epochs + 1)]
        else:
            out.append(name)
    return out


def known(tasks: list[str], epochs: int = 1) -> list[str]:
    names = [f"{short(t)}.{m}" for t in tasks for m in task_metrics(t, epochs)]
    names += [f"{lat}.{stat}" for lat in LATENCIES for stat in STATISTICS]
    return names + list(MACHINE)


def check(name: str, tasks: list[str], epochs: int = 1, local: bool = True) -> None:
    """Refuse a name this run would not measure, saying what it would."""
    if name in LOCAL_ONLY and not local:
        raise ValueError(f"{name} is measured only for a model served here (--model); an endpoint's memory is the "
                         "server's to report")
    names = known(tasks, epochs)
    if name in names:
        return
    task, _, metric = name.partition(".")
    here = {short(t) for t in tasks}
    repeats = re.fullmatch(r"pass([@^])(\d+)", metric)
    if task in here and repeats and f"pass{repeats.group(1)}K" in TASKS.get(task, {}) and int(repeats.group(2)) > epochs:
        raise ValueError(f"{name} needs --epochs {repeats.group(2)} or more (this run has {epochs})")
    own = [n for n in names if n.startswith(task + ".")] if task in here else []
    close = difflib.get_close_matches(name, names, n=3)
    hint = (f"; {task} reports {', '.join(n.split('.', 1)[1] for n in own)}" if own
            else f"; the tasks of this run are {', '.join(sorted(here))}")
    raise ValueError(f"no metric {name!r} in this run" + (f" (did you mean {', '.join(close)}?)" if close else "") + hint
                     + " (the names: docs/guide/check.md)")
