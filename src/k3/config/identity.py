"""What a result or a server is running on: k3's version and commit, and the machine (CPU, cores, system). Evaluation reports record it for the model they ran in-process; `k3 serve` reports it at /version,
so a report on an endpoint names the server's machine, never the client's."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from k3.config import cpuinfo


def commit() -> str | None:
    """The commit of k3's own checkout (an installed wheel has none), marked dirty when it has changes."""
    root = Path(__file__).resolve().parents[3]
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
    """The CPU, its cores and the system (torch's version and the GPU: tools/machine.torch_facts)."""
    cpu = cpuinfo.field("model name") or platform.processor() or platform.machine()
    return {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform()}


def describe() -> dict:
    """{"server": "k3", "version", "commit", "hardware"}: this process, as a server names itself."""
    from k3 import __version__

    return {"server": "k3", "version": __version__, "commit": commit(), "hardware": hardware()}
