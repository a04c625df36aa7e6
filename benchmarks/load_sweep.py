"""k3 check's load sweep beside GuideLLM's, against the same server in one run (issue 65).

Both sweep the same way: one request at a time (synchronous), all at once (throughput), then Poisson request
rates between the two rates those achieved. Both send the same prompts (k3's refusal set, the first
--items of it as `k3 check --limit` draws them) with the same answer length. k3's sweep also scores the
answers served at each level and decides the requirements on their intervals, so it reports a boundary;
GuideLLM reports the load figures. The server is the bundled model under `k3 serve` (or --endpoint).

    .venv/bin/python benchmarks/load_sweep.py [--items 24] [--max-tokens 32] [--rates 4] [--endpoint URL]

GuideLLM comes from PyPI into its own virtual environment (~/.cache/k3/guidellm-venv; torch pinned to the
local wheel), since it pulls transformers and datasets, which k3 does not need. Prints both tables, then one
JSON line (date, commit, command).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from servers import wait_up

ROOT = Path(__file__).resolve().parents[1]
K3 = str(Path(sys.executable).with_name("k3"))
GUIDELLM_VENV = Path.home() / ".cache" / "k3" / "guidellm-venv"
GUIDELLM_PIN = "guidellm==0.8.1"
REQUIRE = ["ttft.p50<=250ms", "tpot.p50<=20ms"]   # latency: the bundled model writes prose, cut at --max-tokens


def guidellm() -> str:
    exe = GUIDELLM_VENV / "bin" / "guidellm"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(GUIDELLM_VENV)], check=True)
        subprocess.run([str(GUIDELLM_VENV / "bin" / "pip"), "install", "-q", "torch==2.13.0", GUIDELLM_PIN], check=True)
    return str(exe)


def serve(port: int):
    proc = subprocess.Popen([K3, "serve", "--port", str(port), "--cache-memory", "64MiB", "--max-num-seqs", "8"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, wait_up(proc, f"http://127.0.0.1:{port}", "k3 serve")


def prompts(items: int, max_tokens: int, path: Path) -> None:
    """The refusal items `k3 check refusal --limit N` sends, as GuideLLM reads them (prompt, answer length)."""
    from k3.eval.inspect.refusal import refusal

    rows = [{"prompt": s.input, "output_tokens_count": max_tokens} for s in refusal(limit=items).dataset]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def k3_sweep(url: str, args, log_dir: Path) -> dict:
    argv = [K3, "check", "refusal", "--endpoint", url, "--limit", str(args.items), "--max-tokens", str(args.max_tokens),
            "--sweep", f"auto={args.rates}", "--log-dir", str(log_dir), "--json", "--require", *args.require]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode not in (0, 1, 3):
        raise SystemExit(f"k3 check failed ({r.returncode}): {r.stderr[-800:]}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    rows = [{"level": s["level"], "rate": s["achieved_rate"], "ttft_p50_ms": (s["speed"]["ttft_ms"] or {}).get("p50"),
             "ttft_p90_ms": (s["speed"]["ttft_ms"] or {}).get("p90"), "tpot_p50_ms": (s["speed"]["tpot_ms"] or {}).get("p50"),
             "score": (s["scores"].get("refusal.score") or {}).get("value"), "status": s["status"],
             "requests": s["speed"]["completed"]} for s in result["sweep"]["steps"]]
    return {"rows": rows, "boundary": result["sweep"]["summary"], "verdict": result["verdict"]}


def guidellm_sweep(url: str, args, data: Path, out: Path) -> dict:
    argv = [guidellm(), "run", "--backend", f"kind=openai_http,target={url},model=default",
            "--profile", f"kind=sweep,sweep_size={args.rates + 2},strategy_type=poisson",
            "--data", f"kind=json_file,path={data}", "--constraint", f"kind=max_requests,count={args.items}",
            "--output", f"kind=json,path={out}", "--disable-progress"]
    r = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if r.returncode != 0:
        raise SystemExit(f"guidellm failed ({r.returncode}): {(r.stderr or r.stdout)[-800:]}")
    rows = []
    for b in json.loads(out.read_text())["benchmarks"]:
        m, strategy = b["metrics"], b["config"]["strategy"]
        p = lambda key, q: m[key]["successful"]["percentiles"][q]          # noqa: E731
        level = strategy["type_"] + (f"@{strategy['rate']:.3g}" if strategy.get("rate") else "")
        rows.append({"level": level, "rate": m["requests_per_second"]["successful"]["mean"],
                     "ttft_p50_ms": p("time_to_first_token_ms", "p50"), "ttft_p90_ms": p("time_to_first_token_ms", "p90"),
                     # GuideLLM's inter-token latency is vLLM's TPOT ((end - first token) / (tokens - 1)); its own
                     # "time per output token" counts the first token's wait in as well
                     "tpot_p50_ms": p("inter_token_latency_ms", "p50"),
                     "requests": m["request_totals"]["successful"]})
    return {"rows": rows}


def show(title: str, rows: list[dict]) -> None:
    print(f"\n{title}\n{'level':<16}{'req/s':>8}{'TTFT p50':>11}{'TTFT p90':>11}{'TPOT p50':>11}{'calls':>7}  status")
    for r in rows:
        status = r.get("status", "")
        print(f"{r['level']:<16}{r['rate'] or 0:>8.3f}{r['ttft_p50_ms'] or 0:>9.1f}ms{r['ttft_p90_ms'] or 0:>9.1f}ms"
              f"{r['tpot_p50_ms'] or 0:>9.1f}ms{r['requests']:>7}  {status}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=24, help="requests a level (the refusal set's first, drawn across classes)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rates", type=int, default=4, help="rates between synchronous and throughput")
    ap.add_argument("--require", nargs="+", default=REQUIRE, help="k3's requirements at every level")
    ap.add_argument("--endpoint", help="a server to sweep (default: the bundled model under k3 serve here)")
    ap.add_argument("--port", type=int, default=8413)
    args = ap.parse_args()
    guidellm()                                         # installed before the server starts
    server, url = (None, args.endpoint.rstrip("/").removesuffix("/v1")) if args.endpoint else serve(args.port)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "prompts.jsonl"
            prompts(args.items, args.max_tokens, data)
            ours = k3_sweep(url, args, Path(tmp) / "k3")
            theirs = guidellm_sweep(url, args, data, Path(tmp) / "guidellm.json")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    show("k3 check --sweep (each level scored and decided)", ours["rows"])
    print(f"operating range: {ours['boundary']}")
    show("GuideLLM sweep (poisson)", theirs["rows"])
    from k3.eval.inspect.provenance import provenance

    p = provenance(None)
    ratio = lambda level: (ours["rows"][0 if level == "sync" else -1]["rate"] or 0) / \
        (theirs["rows"][0 if level == "sync" else 1]["rate"] or float("nan"))       # noqa: E731
    print(json.dumps({"bench": "load_sweep", "date": p["date"], "commit": p["k3_commit"], "cpu": p["hardware"]["cpu"],
                      "command": " ".join(["benchmarks/load_sweep.py", *sys.argv[1:]]), "items": args.items,
                      "max_tokens": args.max_tokens, "requirements": args.require, "k3": ours, "guidellm": theirs,
                      "sync_rate_k3_over_guidellm": ratio("sync"), "throughput_rate_k3_over_guidellm": ratio("top"),
                      "guidellm_version": GUIDELLM_PIN.split("==")[1]}))


if __name__ == "__main__":
    main()
