"""The safe operating range, GuideLLM's way: load stepped up (concurrency or a Poisson request rate) until
the latency requirements break; the highest load that still meets them is the answer, with quality checked
on a sample of the set at each load. Load comes from k3 bench's runner over the set's own first-turn
prompts; quality from k3 eval's tasks on Inspect, run that many calls at a time."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from k3.bench.metrics import summarize
from k3.bench.openai_client import OpenAIClient
from k3.bench.runner import run_workload
from k3.bench.workloads import BenchPrompt
from k3.eval.check import thresholds
from k3.eval.inspect import launch
from k3.eval.inspect.messages import to_k3

KINDS = ("concurrency", "rate")
LOAD_NAMES = thresholds.LATENCIES + ("output_throughput", "failed")


def parse(text: str) -> tuple[str, list[float]]:
    """`concurrency=1,2,4,8` or `rate=0.5,1,2` -> (kind, levels ascending)."""
    kind, sep, values = text.partition("=")
    try:
        levels = sorted(float(v) for v in values.split(",") if v.strip())
    except ValueError:
        levels = []
    if kind not in KINDS or not sep or not levels or min(levels) <= 0:
        raise ValueError(f"--sweep {text!r}: expected concurrency=1,2,4,8 or rate=0.5,1,2 (positive levels)")
    if kind == "concurrency" and any(v != int(v) for v in levels):
        raise ValueError(f"--sweep {text!r}: concurrency levels are whole numbers")
    return kind, levels


def prompts_of(tasks: list[str], task_args: dict, limit: int | None, max_tokens: int) -> list[BenchPrompt]:
    """The sets' items as chat requests (their first turn: the input before any solver adds to it)."""
    out = []
    for spec in tasks:
        task, _ = launch.resolve(spec, task_args, limit, 1)
        if isinstance(task, str):
            raise ValueError(f"{spec}: a sweep takes k3's tasks (their items are read as requests)")
        for s in task.dataset:
            messages = [{"role": "user", "content": s.input}] if isinstance(s.input, str) else to_k3(s.input)
            out.append(BenchPrompt(None, None, max_tokens, messages=messages, tag={"task": spec, "id": s.id}))
    return out


def load_step(base_url: str, name: str, api_key, prompts, kind: str, level: float) -> dict:
    async def go():
        client = OpenAIClient(base_url, "chat", api_key, name)
        try:
            return await run_workload(client, prompts, concurrency=int(level) if kind == "concurrency" else None,
                                      request_rate=level if kind == "rate" else float("inf"), seed=0)
        finally:
            await client.close()

    records, duration = asyncio.run(go())
    return summarize(records, duration)


def sweep(check, kind: str, levels: list[float], sample: int, served: tuple, run_quality, measure) -> dict:
    """Each level: load latency (judged by the latency requirements), then quality on `sample` items at that
    load. Stops after the first level that breaks the latency requirements. served: (OpenAI root, sampler)."""
    latency = [r for r in check.requirements if r.name.split(".")[0] in LOAD_NAMES or r.name in LOAD_NAMES]
    steps = []
    base_url = served[0]
    name = check.served_model_name or launch.first_model(base_url, check.api_key)
    prompts = prompts_of(check.tasks, check.task_args, check.limit, check.max_tokens or 1024)
    # Once through, not counted: the same prompts come at every level, so every level meets the server's
    # caches (k3's prefix cache, kernels built on first use) as warm as the last.
    load_step(base_url, name, check.api_key, prompts, "concurrency", 1)
    for level in levels:
        speed = load_step(base_url, name, check.api_key, prompts, kind, level)
        rows = thresholds.judge(latency, measure({}, speed, {}))
        at_load = replace(check, served_model_name=name, limit=sample, log_dir=f"{check.log_dir}/sweep-{level:g}",
                          requirements=[r for r in check.requirements if r not in latency],
                          max_connections=int(level) if kind == "concurrency" else None)
        quality = run_quality(at_load, served)
        steps.append({"level": level, "speed": speed, "requirements": rows, "meets": all(r["status"] == "PASS"
                      for r in rows), "quality": {k: v for k, v in quality["measured"].items()
                                                  if "." in k and k.split(".")[0] not in LOAD_NAMES},
                      "quality_verdict": quality["verdict"]})
        if not steps[-1]["meets"]:
            break
    passing = [s["level"] for s in steps if s["meets"]]
    return {"kind": kind, "levels": levels, "steps": steps, "safe_level": max(passing) if passing else None}
