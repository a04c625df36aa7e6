"""Server load test on loopback: a mid-size random K3 model behind `k3 serve`'s app, streaming chat
clients at concurrency 1, 8 and 32. Reports output tokens/s, TTFT and TPOT (mean, p50, p90).

    .venv/bin/python benchmarks/serve.py [--requests-per-level 32] [--max-tokens 32]

TTFT: request sent -> first streamed token (reasoning or content). TPOT: (last - first token) /
(tokens - 1), per request. Prints a table, then one JSON line. Random weights: speed only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from k3.config.presets import mid
from k3.engine import LLM
from k3.serve.app import Server, build_app
from k3.engine.thread import EngineThread
from k3.serve.async_engine import AsyncEngine
from k3.testing import make_checkpoint


def start(server: Server) -> tuple[uvicorn.Server, str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    uv = uvicorn.Server(uvicorn.Config(build_app(server), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=uv.run, daemon=True).start()
    while not uv.started:
        time.sleep(0.05)
    return uv, f"http://127.0.0.1:{port}"


async def one(client: httpx.AsyncClient, url: str, i: int, max_tokens: int) -> dict:
    body = {"model": "bench", "messages": [{"role": "user", "content": f"Request {i}: tell me a story."}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    start, stamps = time.perf_counter(), []
    async with client.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {") and ('"reasoning_content"' in line or '"content": "' in line):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("reasoning_content") or delta.get("content"):
                    stamps.append(time.perf_counter())
    ttft = stamps[0] - start if stamps else float("nan")
    tpot = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else float("nan")
    return {"ttft": ttft, "tpot": tpot, "chunks": len(stamps)}


async def level(url: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(limits=limits) as client:
        gate = asyncio.Semaphore(concurrency)

        async def gated(i):
            async with gate:
                return await one(client, url, i, max_tokens)

        t = time.perf_counter()
        results = await asyncio.gather(*(gated(i) for i in range(requests)))
        wall = time.perf_counter() - t
    def stats(key):
        xs = sorted(r[key] for r in results)
        return {"mean": statistics.fmean(xs), "p50": xs[len(xs) // 2], "p90": xs[int(len(xs) * 0.9) - 1]}
    return {"concurrency": concurrency, "requests": requests, "wall_s": wall,
            "output_tok_s": requests * max_tokens / wall, "ttft_s": stats("ttft"), "tpot_s": stats("tpot")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=".bench/mid-chat")
    ap.add_argument("--requests-per-level", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    config = mid(eos_token_id=32000 - 254)
    path = Path(args.dir)
    if not (path / "config.json").exists():
        make_checkpoint(path, config, num_shards=4, tokenizer=True)
    thread = EngineThread()   # built where it is stepped, as k3 serve does
    llm = thread.call(LLM, str(path), max_num_seqs=32, max_num_batched_tokens=2048, cache_memory="2GiB")
    engine = AsyncEngine(llm.engine, max_queued=256, thread=thread)
    uv, url = start(Server(engine, llm.tokenizer, "bench"))
    asyncio.run(level(url, 1, 1, 4))   # warm-up
    rows = [asyncio.run(level(url, c, max(c, args.requests_per_level if c > 1 else 4), args.max_tokens))
            for c in (1, 8, 32)]
    uv.should_exit = True
    engine.shutdown()
    print(f"{'concurrency':>11}{'requests':>10}{'out tok/s':>11}{'TTFT p50 s':>12}{'TTFT p90 s':>12}{'TPOT p50 s':>12}")
    for r in rows:
        print(f"{r['concurrency']:>11}{r['requests']:>10}{r['output_tok_s']:>11.1f}{r['ttft_s']['p50']:>12.3f}"
              f"{r['ttft_s']['p90']:>12.3f}{r['tpot_s']['p50']:>12.3f}")
    print(json.dumps({"preset": "mid", "max_tokens": args.max_tokens, "levels": rows}))


if __name__ == "__main__":
    main()
