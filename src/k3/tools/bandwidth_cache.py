"""Measured bandwidths remembered between runs (`k3 plan`), per drive and for memory, in
~/.cache/k3/bandwidth.json (K3_CACHE_DIR overrides the folder). Written to a temporary file, then renamed."""

from __future__ import annotations

import json
import time
from pathlib import Path

from k3.config import env


def cache_file() -> Path:
    return env.folder("K3_CACHE_DIR", "") / "bandwidth.json"


def _load() -> dict:
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}


def cached(key: str) -> float | None:
    entry = _load().get(key)
    return float(entry["bytes_per_s"]) if isinstance(entry, dict) and "bytes_per_s" in entry else None


def measured_on(key: str) -> str:
    """When the cached value of `key` was measured ("" when unknown)."""
    entry = _load().get(key)
    return str(entry.get("measured", "")) if isinstance(entry, dict) else ""


def remember(key: str, bytes_per_s: float) -> float:
    from k3.checkpoint.writer import atomic_write_text

    data = _load() | {key: {"bytes_per_s": bytes_per_s, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}}
    try:
        cache_file().parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cache_file(), json.dumps(data, indent=1))
    except OSError:
        pass   # an unwritable cache only costs a measurement next time
    return bytes_per_s
