"""One check: the tasks through Inspect (k3 eval's launcher and tasks) against an endpoint, every call streamed
and timed (measured.py), then quality, latency and memory joined into one record and judged against the
requirements. A local model is served in this process on loopback, so it is measured through the same path
as a remote one, and the process's peak RSS is the engine's."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from inspect_ai.model import GenerateConfig, get_model

from k3.bench.metrics import summarize
from k3.bench.records import RequestRecord
from k3.eval.check import thresholds
from k3.eval.check.measured import timing_of
from k3.eval.check.memory import RssSampler
from k3.eval.inspect import launch
from k3.eval.inspect import provenance as prov
from k3.eval.metrics.names import short
from k3.tools.proc_memory import peak_rss

RECORD_FIELDS = {f.name for f in fields(RequestRecord)}
RETRIES = 2


@dataclass
class Check:
    tasks: list[str]
    endpoint: str | None = None            # an OpenAI root; or
    model: str | None = None               # a model reference served here
    served_model_name: str | None = None
    api_key: str | None = None
    requirements: list = field(default_factory=list)   # thresholds.Requirement
    limit: int | None = None
    epochs: int = 1
    task_args: dict = field(default_factory=dict)
    max_tokens: int | None = None
    thinking: bool | None = None
    log_dir: str = "check-runs"
    progress: bool = False
    engine: dict = field(default_factory=dict)   # EngineConfig.settings() of a model served here
    max_connections: int | None = None     # calls in flight at once (Inspect's); the provider's 8 when None
    arrival_rate: float | None = None      # requests a second, Poisson arrivals (a sweep's rate levels)
    judge: object = None                   # launch.Target of a judge model, or None
    dependent_judge: bool = False          # run although the judge is not independent of the model (recorded)


def run(c: Check, served: tuple | None = None) -> dict:
    """served: (OpenAI root, RssSampler or None) of a target already up (a sweep or a comparison shares it);
    else the check brings its own up and down. A task that did not finish (an endpoint that dropped, a judge
    that failed) makes the verdict ERROR: a partial result is never judged."""
    start = time.perf_counter()
    with (contextlib.nullcontext(served) if served else serve(c)) as (base_url, local):
        name = c.served_model_name or launch.first_model(base_url, c.api_key)
        model = get_model(f"k3check/{name}", base_url=base_url, api_key=c.api_key or "none", memoize=False,
                          thinking=c.thinking, rate=c.arrival_rate)
        listed = prov.served_model(base_url, name, c.api_key)
        target = launch.Target(model, name, base_url, listed.get("fingerprint"), listed.get("max_model_len"),
                               server=prov.server_identity(base_url, c.api_key) if not local else None)
        # A call that fails is tried again, twice: a run whose calls keep failing ends in error (verdict ERROR).
        config = GenerateConfig(max_tokens=c.max_tokens, max_connections=c.max_connections, max_retries=RETRIES)
        logs, report, paths = launch.run(launch.Run(c.tasks, target, judge=c.judge, task_args=c.task_args,
                                                    limit=c.limit, epochs=c.epochs, log_dir=c.log_dir, config=config,
                                                    progress=c.progress, dependent_judge=c.dependent_judge))
        memory = _memory(local) if local else {}
    records = calls(logs)
    speed = summarize(records, time.perf_counter() - start)
    ends = [r.end for r in records if r.end is not None]
    speed["load_span_s"] = max(ends) - min(r.start for r in records) if ends else None   # first send to last token
    found = measure(logs, records, speed, memory)
    rows = thresholds.judge(c.requirements, found)
    errors = report.get("problems", [])
    settings = {k: v for k, v in vars(c).items() if k not in ("requirements", "api_key", "judge")}
    return {"verdict": "ERROR" if errors else thresholds.verdict(rows), "errors": errors, "requirements": rows,
            "settings": settings, "measured": {k: v.to_dict() for k, v in found.items()}, "speed": speed,
            "memory": memory, "items": items(logs), "provenance": report.get("provenance", {}),
            "target": target.identity(), "local": local is not None,
            "report": str(paths[-1]) if paths else None, "seconds": time.perf_counter() - start}


@contextlib.contextmanager
def serve(c: Check):
    """(the endpoint's OpenAI root, and for a model served here the RssSampler watching this process; else None)."""
    if c.endpoint:
        yield launch.openai_root(c.endpoint), None
        return
    from k3 import LLM
    from k3.serve.loopback import serving

    with RssSampler() as rss:
        llm = LLM(c.model or "default", **c.engine)
        with serving(llm, c.served_model_name or "default") as url:
            yield url + "/v1", rss


def _memory(sampler) -> dict:
    """This process's peak RSS and RSS over time; on a GPU, the peak device memory torch allocated."""
    out = {"peak_rss_bytes": peak_rss(), "rss_over_time": sampler.samples}
    import torch

    if torch.cuda.is_available():
        out["peak_gpu_memory_bytes"] = torch.cuda.max_memory_allocated()
    return out


def calls(logs) -> list[RequestRecord]:
    """Every timed model call of the run, from the logs (each ModelEvent's output)."""
    out = []
    for log in logs:
        for sample in log.samples or []:
            for event in sample.events or []:
                timing = timing_of(getattr(event, "output", None)) if event.event == "model" else None
                if timing is not None:
                    out.append(RequestRecord(**{k: v for k, v in timing.items() if k in RECORD_FIELDS}))
    return out


def items(logs) -> list[dict]:
    """Per item: its task, id, score, and its calls' latency (the first call's TTFT; all calls' end-to-end)."""
    from k3.eval.inspect.sample_scores import first_score, main_value

    out = []
    for log in logs:
        for s in log.samples or []:
            timed = [RequestRecord(**{k: v for k, v in t.items() if k in RECORD_FIELDS}) for e in s.events or []
                     if e.event == "model" and (t := timing_of(e.output)) is not None]
            score = first_score(s)
            out.append({"task": short(log.eval.task), "id": s.id, "epoch": s.epoch,
                        "score": main_value(score) if score else None, "calls": len(timed),
                        "ttft_s": timed[0].ttft if timed else None, "ttfvt_s": timed[0].ttfvt if timed else None,
                        "tpot_s": [r.tpot for r in timed], "e2el_s": sum(r.e2el or 0 for r in timed),
                        "output_tokens": sum(r.output_tokens for r in timed),
                        "prompt_tokens": sum(r.prompt_tokens for r in timed),
                        "errors": [r.error for r in timed if r.error]})
    return out


def measure(logs, records, speed: dict, memory: dict) -> dict:
    """Every value a requirement may name (metrics/names.py) -> its Measured: each task's quality metrics from
    its log, the latencies from the timed calls, the run's throughput, failures and memory."""
    from k3.eval.metrics import latency, quality

    out = {}
    for log in logs:
        out.update(quality.measures(log))
    return out | latency.measures(records, speed, memory)


def write(result: dict, log_dir: str | Path) -> Path:
    """check.json beside the Inspect logs (temp file, then rename)."""
    import json
    import os

    out = Path(log_dir) / "check.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    os.replace(tmp, out)
    return out
