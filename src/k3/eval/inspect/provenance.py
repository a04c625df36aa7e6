"""Where a result came from, recorded in every log k3 writes (Inspect's eval metadata, key "k3"): the date,
k3's version and commit, the hardware, and the fingerprint of the weights evaluated, so two reports can
be compared knowing what was run where, and a judge can be refused when it is the model it judges."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

import httpx

import k3
from k3.config import cpuinfo


def provenance(model_fingerprint: str | None) -> dict:
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "k3_version": k3.__version__, "k3_commit": _commit(), "hardware": hardware(),
            "model_fingerprint": model_fingerprint}


def _commit() -> str | None:
    """The commit of k3's own checkout (an installed wheel has none), marked dirty when it has changes."""
    root = Path(k3.__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def hardware() -> dict:
    cpu = cpuinfo.field("model name") or platform.processor() or platform.machine()
    out = {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform()}
    try:
        import torch

        out["torch"] = torch.__version__
        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return out


def served_model(base_url: str, model: str | None, api_key: str | None = None, timeout: float = 30.0) -> dict:
    """What an endpoint's /v1/models lists for `model` ({} when it lists nothing): `k3 serve` gives the weights'
    "fingerprint" and "max_model_len", vLLM the latter."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(base_url.rstrip("/") + "/models", headers=headers, timeout=timeout)
        r.raise_for_status()
        rows = r.json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}
    return next((row for row in rows if isinstance(row, dict) and (model is None or row.get("id") == model)), {})


def check_judge(judge: dict, tested: dict) -> None:
    """Refuse a judge that is the model under test: the same weights fingerprint (under any name), or the
    same name at the same address. `judge`/`tested`: {"name", "base_url", "fingerprint"}."""
    if judge.get("fingerprint") and judge["fingerprint"] == tested.get("fingerprint"):
        raise ValueError(f"the judge {judge['name']!r} serves the same weights as the model under test (fingerprint "
                         f"{judge['fingerprint'][:12]}...): a model cannot judge itself; use another model as judge")
    if judge.get("name") == tested.get("name") and judge.get("base_url") == tested.get("base_url"):
        raise ValueError(f"the judge is the model under test ({judge['name']!r} at the same address); use another model")
