"""Text requests beside heavy image requests on one `k3 serve` (the tiny vision checkpoint, made on the spot):
a text-only chat's latency alone, then while six clients keep sending a large photo-sized PNG (cheap in
bytes, costly to decode, resize and put through the tower); with the server's image work bounded (its own
pool at a lower priority, a queue bound, the tower run in that pool), the text request should stay near
its unloaded time and the process's memory bounded. Counts the image requests answered and refused (429).

    .venv/bin/python benchmarks/image_starvation.py [--seconds 40] [--side 6000]

Prints a table, then one JSON line (with date, commit and command).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import resource
import statistics
import sys
import tempfile
import threading
import time

import httpx
import torch

from k3 import LLM
from k3.config.presets import tiny_chat_vision
from k3.eval.inspect.provenance import provenance
from k3.testing.checkpoint import make_checkpoint
from k3.testing.serving import serving


def heavy_png(side: int) -> bytes:
    from PIL import Image

    ramp = torch.linspace(0, 255, side).to(torch.uint8)
    rgb = torch.stack([ramp.expand(side, side), ramp.expand(side, side).T, (ramp.expand(side, side) // 2)], -1)
    buf = io.BytesIO()
    Image.fromarray(rgb.numpy()).save(buf, "PNG", optimize=False)
    return buf.getvalue()


def text_latency(url: str) -> float:
    body = {"model": "default", "max_tokens": 8, "temperature": 0, "messages": [{"role": "user", "content": "Say hi."}]}
    t0 = time.perf_counter()
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    return time.perf_counter() - t0


def image_client(url: str, data_url: str, stop: threading.Event, counts: dict, lock: threading.Lock) -> None:
    body = {"model": "default", "max_tokens": 2, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": data_url}}]}]}
    while not stop.is_set():
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
        with lock:
            counts[r.status_code] = counts.get(r.status_code, 0) + 1
        if r.status_code == 429:
            time.sleep(float(r.headers.get("Retry-After", "1")))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--side", type=int, default=6000)
    ap.add_argument("--clients", type=int, default=6)
    args = ap.parse_args()
    png = heavy_png(args.side)
    data_url = "data:image/png;base64," + base64.b64encode(png).decode()
    llm = LLM(make_checkpoint(tempfile.mkdtemp(), tiny_chat_vision(), seed=3, tokenizer=True), dtype=torch.float32,
              cache_memory="256MiB")
    with serving(llm) as url:
        text_latency(url)                                                   # warm
        alone = [text_latency(url) for _ in range(5)]
        stop, counts, lock = threading.Event(), {}, threading.Lock()
        clients = [threading.Thread(target=image_client, args=(url, data_url, stop, counts, lock), daemon=True)
                   for _ in range(args.clients)]
        for c in clients:
            c.start()
        time.sleep(3)                                                       # the image work under way
        loaded, end = [], time.perf_counter() + args.seconds
        while time.perf_counter() < end:
            loaded.append(text_latency(url))
        stop.set()
        for c in clients:
            c.join(600)
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    result = {"png_bytes": len(png), "side": args.side, "clients": args.clients, "seconds": args.seconds,
              "text_alone_s": round(statistics.median(alone), 3), "text_loaded_median_s": round(statistics.median(loaded), 3),
              "text_loaded_max_s": round(max(loaded), 3), "text_requests_loaded": len(loaded),
              "image_answers": counts.get(200, 0), "image_429": counts.get(429, 0),
              "image_other": sum(v for k, v in counts.items() if k not in (200, 429)), "peak_rss_gb": round(rss_gb, 2)}
    for k, v in result.items():
        print(f"{k:<24}{v:>12}")
    p = provenance(None)
    print(json.dumps({"bench": "image_starvation", "date": p["date"], "commit": p["k3_commit"], "cpu": p["hardware"]["cpu"],
                      "command": " ".join(["benchmarks/image_starvation.py", *sys.argv[1:]]), **result}))
    return 0 if result["image_other"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
