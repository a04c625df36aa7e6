"""What a sandboxed run gives back: its exit code, output, limits hit, the isolation layers that took hold
(read from the launcher's report) and, for a judged run, the judge's verdict; and how the output is read
within the run's limits."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from dataclasses import dataclass, field


@dataclass
class RunResult:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    output_exceeded: bool = False
    layers: list[str] = field(default_factory=list)   # isolation that took hold in the child
    verdict: dict | None = None    # Sandbox.judge's verdict; None when the run ended before the judge spoke

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_exceeded

    def summary(self, limit: int = 4000) -> str:
        """What a model sees as the tool result."""
        head = f"exit code {self.exit_code}" + (" (killed: time limit)" if self.timed_out else "") + \
            (" (killed: output limit)" if self.output_exceeded else "")
        return f"{head}\n--- stdout ---\n{self.stdout[-limit:]}\n--- stderr ---\n{self.stderr[-limit:]}"


def read_report(fd: int) -> tuple[list[str], dict | None]:
    """The launcher's report: the layers that took hold, then (judged runs) the verdict, a JSON line each."""
    with os.fdopen(fd, "rb") as f:
        lines = f.read(64 << 20).splitlines()
    parsed = []
    for line in lines[:2]:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            break
    layers = parsed[0] if parsed and isinstance(parsed[0], list) else []
    verdict = parsed[1] if len(parsed) > 1 and isinstance(parsed[1], dict) else None
    return layers, verdict


def collect(proc, wall_s: float, output_bytes: int) -> tuple[list[bytes], bool, bool]:
    """Read a run's stdout/stderr until both close, the wall limit passes or the output limit is hit ->
    ([stdout, stderr], timed out, output exceeded)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, 0)
    sel.register(proc.stderr, selectors.EVENT_READ, 1)
    bufs, total, deadline = [bytearray(), bytearray()], 0, time.monotonic() + wall_s
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            return [bytes(b) for b in bufs], True, False
        for key, _ in sel.select(timeout=min(left, 0.5)):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            keep = max(0, output_bytes - total)
            bufs[key.data] += chunk[:keep]
            total += len(chunk)
            if total > output_bytes:
                return [bytes(b) for b in bufs], False, True
    try:  # both pipes closed: the child may still be running (it can close them itself)
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return [bytes(b) for b in bufs], True, False
    return [bytes(b) for b in bufs], False, False
