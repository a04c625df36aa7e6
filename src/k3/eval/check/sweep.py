"""The load sweep, in the manner of GuideLLM's: where does the deployment stop meeting the bar?

`auto` runs the set one request at a time (synchronous), then all at once (throughput), then at request
rates evenly between the two rates those achieved (Poisson arrivals), lowest first; `concurrency=1,2,4`
and `rate=0.5,1,2` run given levels. Every level is a whole check: the set's items are sent at that load,
their answers are scored (quality measured on what was served under that load, not on a quiet sample),
their calls timed, and every requirement decided on its interval. The boundary is the highest load that
holds (PASS) with every lower one holding too; the sweep stops at the first level that fails. The
check's verdict is the lowest load's: the bar one request at a time; the boundary says how far it holds."""

from __future__ import annotations

from dataclasses import replace

KINDS = ("auto", "concurrency", "rate")
AUTO_RATES = 4
ALL_AT_ONCE = 100_000        # connections: every item in flight (the throughput level)


def parse(text: str) -> tuple[str, list[float]]:
    """`auto`, `auto=N` (N rates between), `concurrency=1,2,4,8` or `rate=0.5,1,2` -> (kind, levels ascending)."""
    kind, sep, values = text.partition("=")
    if kind == "auto":
        try:
            n = int(values) if sep else AUTO_RATES
        except ValueError:
            n = -1
        if not 0 <= n <= 20:
            raise ValueError(f"--sweep {text!r}: auto takes the number of rates between, 0 to 20 (auto=4)")
        return kind, [float(n)]
    try:
        levels = sorted(float(v) for v in values.split(",") if v.strip())
    except ValueError:
        levels = []
    if kind not in KINDS or not sep or not levels or min(levels) <= 0:
        raise ValueError(f"--sweep {text!r}: expected auto, auto=N, concurrency=1,2,4,8 or rate=0.5,1,2 (positive levels)")
    if kind == "concurrency" and any(v != int(v) for v in levels):
        raise ValueError(f"--sweep {text!r}: concurrency levels are whole numbers")
    return kind, levels


def sweep(check, kind: str, levels: list[float], served: tuple, run_check) -> tuple[dict, dict]:
    """-> ({"kind", "steps": [...], "holds_up_to", "breaks_at", "summary"}, the lowest level's whole result);
    served: (OpenAI root, sampler)."""
    # Once through, not counted: every level then meets the server's caches (k3's prefix cache, kernels built
    # on first use) as warm as the last.
    run_check(replace(check, requirements=[], max_connections=1, log_dir=f"{check.log_dir}/sweep-warmup"), served)

    def step(label: str, connections: int, rate: float | None) -> dict:
        at = replace(check, max_connections=connections, arrival_rate=rate, log_dir=f"{check.log_dir}/sweep-{label}")
        result = run_check(at, served)
        results.append(result)
        return {"level": label, "connections": connections, "rate": rate, "achieved_rate": achieved_rate(result),
                "status": result["verdict"], "requirements": result["requirements"], "speed": result["speed"],
                "scores": {k: v for k, v in result["measured"].items() if k.endswith(".score")},
                "errors": result["errors"]}

    steps: list[dict] = []
    results: list[dict] = []
    if kind == "auto":
        steps.append(step("synchronous", 1, None))
        top = step("throughput", ALL_AT_ONCE, None)
        low, high = steps[0]["achieved_rate"] or 0.0, top["achieved_rate"] or 0.0
        between = int(levels[0])
        for i in range(1, between + 1) if high > low > 0 else ():
            rate = low + (high - low) * i / (between + 1)
            if steps[-1]["status"] == "FAIL":
                break
            steps.append(step(f"rate-{rate:.3g}", ALL_AT_ONCE, rate))
        if steps[-1]["status"] != "FAIL":
            steps.append(top)
    else:
        for level in levels:
            if steps and steps[-1]["status"] == "FAIL":
                break
            steps.append(step(f"{kind}-{level:g}", int(level) if kind == "concurrency" else ALL_AT_ONCE,
                              level if kind == "rate" else None))
    return {"kind": kind, "steps": steps, **boundary(steps)}, results[0]


def achieved_rate(result: dict) -> float | None:
    """Calls completed a second, from the first send to the last token (the load the server actually took)."""
    speed = result["speed"]
    span = speed.get("load_span_s")
    return speed["completed"] / span if span else None


def boundary(steps: list[dict]) -> dict:
    """The highest level that holds with every lower level holding, and the first that does not."""
    holds = None
    for s in steps:
        if s["status"] != "PASS":
            why = {"FAIL": "breaks the bar", "INCONCLUSIVE": "is undecided (too few items to decide)",
                   "ERROR": "did not finish"}[s["status"]]
            lead = f"holds up to {_name(holds)}; {_name(s)} {why}" if holds else f"{_name(s)}, the lowest load, {why}"
            return {"holds_up_to": holds and holds["level"], "breaks_at": s["level"], "summary": lead}
        holds = s
    if holds is None:
        return {"holds_up_to": None, "breaks_at": None, "summary": "no level ran"}
    top = "through the throughput level: no boundary below the server's measured capacity" \
        if holds["level"] == "throughput" else "at every level tried: no boundary found (try higher loads)"
    return {"holds_up_to": holds["level"], "breaks_at": None, "summary": f"holds up to {_name(holds)}, {top}"}


def _name(s: dict) -> str:
    rate = s.get("achieved_rate")
    return f"{s['level']} ({rate:.3g} req/s achieved)" if rate else s["level"]
