"""What a sandboxed run gives back: its exit code, output, limits hit, the isolation layers that took hold
(read from the launcher's report) and, for a judged run, the judge's verdict."""

from __future__ import annotations

import json
import os
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
