"""Tool calls against their schemas: how many finished calls fail to validate.

    .venv/bin/python benchmarks/tool_calls.py [--seeds 6]

The tool-schema corpus of tests/engine/tool_schema_corpus.py (Pydantic models, `$ref` trees, keywords outside
`properties`, formats, patterns, escaped keys), each tool offered alone with `tool_choice` "required" and named,
on a random-weight tiny model (its free choices are noise, so it tries every form the grammar allows) and on the
bundled default model. A finished call is one whose answer ended on its own (finish "stop"); it is invalid when the
parser found a problem or its arguments do not validate (jsonschema-rs, formats checked). Run it on two commits to
compare (PYTHONPATH=OLD/src). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import jsonschema_rs

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "engine"))
from scratch import scratch_dir  # noqa: E402
from tool_schema_corpus import CORPUS  # noqa: E402

import k3  # noqa: E402
from k3.config.presets import tiny_chat  # noqa: E402
from k3.defaults import default_model  # noqa: E402
from k3.engine import LLM, SamplingParams  # noqa: E402
from k3.testing import make_checkpoint  # noqa: E402


def count(llm: LLM, name: str, params: dict, seeds: int) -> dict:
    tool = {"type": "function", "function": {"name": name, "parameters": params}}
    check = jsonschema_rs.validator_for(params, validate_formats=True)
    tally = {"calls": 0, "finished": 0, "invalid": 0, "errors": 0}
    for choice in ("required", {"type": "function", "function": {"name": name}}):
        convs = [[{"role": "user", "content": "Call the tool."}]] * seeds
        sp = [SamplingParams(max_tokens=400, temperature=1.0, seed=s) for s in range(seeds)]
        try:
            outs = llm.chat(convs, sp, tools=[tool], tool_choice=choice, thinking=False)
        except ValueError:   # the schema refused (a 400 on the server)
            tally["errors"] += 1
            continue
        for o in outs:
            for call in o.message.tool_calls or []:
                tally["calls"] += 1
                if o.output.finish_reason != "stop":
                    continue
                tally["finished"] += 1
                try:
                    ok = not o.message.problems and check.is_valid(json.loads(call.arguments))
                except ValueError:
                    ok = False
                tally["invalid"] += not ok
    return tally


def run(llm: LLM, seeds: int) -> dict:
    return {name: count(llm, name, params, seeds) for name, params in CORPUS}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=6)
    args = ap.parse_args()
    t0 = time.perf_counter()
    tiny = make_checkpoint(scratch_dir("k3-tools-"), tiny_chat(), seed=2, tokenizer=True)
    models = {"random tiny": LLM(str(tiny), cache_memory="64MiB", max_num_seqs=16),
              "bundled": LLM(str(default_model()), cache_memory="64MiB", max_num_seqs=16)}
    results = {m: run(llm, args.seeds) for m, llm in models.items()}
    print(f"{'schema':<28}" + "".join(f"{m + ' invalid/finished':>28}" for m in results))
    for name, _ in CORPUS:
        print(f"{name:<28}" + "".join(f"{r[name]['invalid']:>18}/{r[name]['finished']:<3}"
                                      + (f" err {r[name]['errors']}" if r[name]["errors"] else "       ")
                                      for r in results.values()))
    totals = {m: {k: sum(t[k] for t in r.values()) for k in ("calls", "finished", "invalid", "errors")}
              for m, r in results.items()}
    for m, t in totals.items():
        print(f"{m}: {t['invalid']} invalid of {t['finished']} finished calls ({t['calls']} calls, "
              f"{t['errors']} refused schemas)")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(k3.__file__).parent).stdout.strip()
    print(json.dumps({"benchmark": "tool_calls", "date": time.strftime("%Y-%m-%d"), "commit": commit,
                      "command": "benchmarks/tool_calls.py --seeds " + str(args.seeds), "seeds": args.seeds,
                      "totals": totals, "per_schema": results, "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
