"""Run a benchmark and keep its result: the JSON line it prints last, with the date, the commit, the
command and the CPU, appended to benchmarks/results/<script>.jsonl. The docs' results page is generated
from these files (scripts/gen_docs.py), so every published figure says where it came from.

    .venv/bin/python benchmarks/record.py benchmarks/engine.py --rounds 2
    .venv/bin/python benchmarks/record.py --from-log run.txt benchmarks/engine.py --rounds 2   # a run already made

The commit is HEAD's; a working tree with changes under src/ or benchmarks/ is refused (the figure would
name code that was not what ran), unless --dirty says so, which the record then carries.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from k3.config import env
from k3.config import cpuinfo

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CAPS = {"scalar": "scalar", "avx2": "AVX2", "avx512": "AVX-512"}   # K3_NATIVE_SIMD's values as kinds name them


def cpu() -> dict:
    """The CPU's model name, kind (the instruction set level k3's kernels use on it) and id (family and
    model numbers: a VM names every Xeon "Intel(R) Xeon(R) Processor", while an Ice Lake and a Sapphire
    Rapids of one kind differ in caches and ports, so the results page keeps a table for each)."""
    info = cpuinfo.fields()
    name = info.get("model name") or platform.processor() or "unknown"
    flags = info.get("flags", "").split()
    kind = "AVX-512" if {"avx512f", "avx512bw", "avx512vl"} <= set(flags) else "AVX2" if "avx2" in flags else "other"
    vendor = "AMD" if "AMD" in name else "Intel" if "Intel" in name else ""
    cap = env.read("K3_NATIVE_SIMD")   # the run's kernels (and llama.cpp's build) capped: its own kind
    capped = f", capped at {CAPS[cap]}" if cap and CAPS[cap] != kind else ""
    family, model = info.get("cpu family"), info.get("model")
    return {"model": name, "kind": f"{vendor} {kind}".strip() + capped,
            "id": f"family {family}, model {model}" if family and model else "",
            "cache": info.get("cache size", ""), "cores": os.cpu_count() or 0}


def capped_as() -> list[str]:
    """The cap the run was made under, as the command's prefix (so the command reproduces it)."""
    cap = env.read("K3_NATIVE_SIMD")
    return [f"K3_NATIVE_SIMD={cap}"] if cap else []


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit("the benchmark printed no JSON line")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from-log", help="take the JSON line from this file instead of running the command")
    ap.add_argument("--dirty", action="store_true", help="record although src/ or benchmarks/ have changes")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="benchmarks/NAME.py [its arguments]")
    args = ap.parse_args()
    if not args.command or not args.command[0].endswith(".py"):
        ap.error("give the benchmark script and its arguments: benchmarks/NAME.py ...")
    changed = git("status", "--porcelain", "--", "src", "benchmarks")
    changed = [line for line in changed.splitlines() if "benchmarks/results/" not in line]
    if changed and not args.dirty:
        raise SystemExit("uncommitted changes under src/ or benchmarks/: commit first, or pass --dirty")
    commit = git("rev-parse", "--short", "HEAD")     # what runs, read before it runs
    if args.from_log:
        text = Path(args.from_log).read_text()
    else:
        run = subprocess.run([sys.executable, *args.command], cwd=ROOT, capture_output=True, text=True)
        sys.stderr.write(run.stderr[-2000:])
        print(run.stdout)
        if run.returncode:
            raise SystemExit(f"the benchmark failed (exit {run.returncode}); nothing recorded")
        text = run.stdout
    record = {"date": time.strftime("%Y-%m-%d"), "commit": commit,
              "dirty": bool(changed), "command": " ".join(capped_as() + ["python", *args.command]), "cpu": cpu(),
              "result": last_json(text)}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / (Path(args.command[0]).stem + ".jsonl")
    with out.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"recorded in {out.relative_to(ROOT)}; regenerate the docs: python scripts/gen_docs.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
