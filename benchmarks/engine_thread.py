"""Where the model is built against where it is stepped (engine/thread.py), side by side, each in a fresh
process (OpenMP's thread teams last a process's life): the bundled model, greedy 32-token completions of
`--requests` prompts one after another,

  in-process:        LLM.generate on the thread that built the model;
  served, same:      through `k3 serve`'s app on loopback, the model built on the EngineThread it runs on
                     (what `k3 serve` does);
  served, apart:     the same, the model built on the main thread and stepped on another (what it did).

    .venv/bin/python benchmarks/engine_thread.py [--requests 12]

Prints a table (seconds a request, and the ratio to in-process), then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = r"""
import sys, time, httpx
from k3 import LLM, SamplingParams
from k3.defaults import default_model
from k3.engine.thread import EngineThread
from k3.serve.app import Server
from k3.serve.async_engine import AsyncEngine
from k3.testing.serving import start_server

mode, n = sys.argv[1], int(sys.argv[2])
prompts = [f"Once upon a time, in the year {1800 + i}," for i in range(n)]
thread = EngineThread()
build = (lambda f, *a, **k: f(*a, **k)) if mode == "apart" else thread.call
llm = build(LLM, str(default_model()), cache_memory="64MiB")
if mode == "in-process":
    params = SamplingParams(max_tokens=32, temperature=0.0)
    thread.call(llm.generate, prompts[:1], params)
    t0 = time.perf_counter()
    for p in prompts:
        thread.call(llm.generate, [p], params)
else:
    engine = AsyncEngine(llm.engine, thread=None if mode == "apart" else thread)
    uv, _, url = start_server(Server(engine, llm.tokenizer, "m"))
    body = lambda p: {"model": "m", "prompt": p, "max_tokens": 32, "temperature": 0}
    httpx.post(url + "/v1/completions", json=body(prompts[0]), timeout=120)
    t0 = time.perf_counter()
    for p in prompts:
        httpx.post(url + "/v1/completions", json=body(p), timeout=120).raise_for_status()
print((time.perf_counter() - t0) / n)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=12)
    args = ap.parse_args()
    out = {}
    for mode in ("in-process", "same", "apart"):
        r = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.requests)], capture_output=True, text=True,
                           check=True)
        out[mode] = float(r.stdout.strip().splitlines()[-1])
    print(f"{'where the model is stepped':<52}{'s/request':>10}{'ratio':>8}")
    for mode, label in (("in-process", "in-process, on the thread that built it"),
                        ("same", "served, built on its engine thread (k3 serve)"),
                        ("apart", "served, built on another thread")):
        print(f"{label:<52}{out[mode]:>10.3f}{out[mode] / out['in-process']:>8.2f}")
    from k3.eval.inspect.provenance import provenance

    p = provenance(None)
    print(json.dumps({"bench": "engine_thread", "date": p["date"], "commit": p["k3_commit"], "cpu": p["hardware"]["cpu"],
                      "cores": p["hardware"]["cores"], "command": " ".join(["benchmarks/engine_thread.py", *sys.argv[1:]]),
                      "s_per_request": out}))


if __name__ == "__main__":
    main()
