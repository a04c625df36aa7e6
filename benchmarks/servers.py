"""A server started by a benchmark (k3 serve, llama-server), waited for until it answers /v1/models."""

from __future__ import annotations

import subprocess
import time

import httpx


def wait_up(proc: subprocess.Popen, url: str, name: str, seconds: float = 120.0) -> str:
    """`url` once the server answers; a server that exits or stays silent ends the benchmark, saying why."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited: {proc.stderr.read().decode(errors='replace')[-800:]}")
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{name} did not come up in {seconds:g} s")
