"""Run untrusted model-written code: a fresh, size-capped workspace; each run in its own user, PID, mount,
IPC and network namespaces (bubblewrap) with a read-only view of only the interpreter; CPU, memory,
process, file-size and output limits; Landlock, seccomp and an audit hook inside."""

from pathlib import Path

from k3.eval.sandbox.limits import Limits
from k3.eval.sandbox.namespaces import SandboxUnavailable
from k3.eval.sandbox.paths import SandboxViolation
from k3.eval.sandbox.result import RunResult
from k3.eval.sandbox.run import ISOLATIONS, Sandbox

__all__ = ["ISOLATIONS", "JUDGE_SOURCES", "Limits", "RunResult", "Sandbox", "SandboxUnavailable", "SandboxViolation"]

# The files that decide a judged verdict inside the sandbox (loaded there by path): fingerprints cover them.
JUDGE_SOURCES = tuple(Path(__file__).with_name(f)
                      for f in ("judge.py", "worker.py", "pytest_judge.py", "wire.py", "launcher.py"))
