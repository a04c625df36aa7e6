"""Run untrusted model-written code: a fresh, size-capped workspace; each run in its own user, PID, mount,
IPC and network namespaces (bubblewrap) with a read-only view of only the interpreter; CPU, memory,
process, file-size and output limits; Landlock, seccomp and an audit hook inside."""

from k3.eval.sandbox.limits import Limits
from k3.eval.sandbox.namespaces import SandboxUnavailable
from k3.eval.sandbox.paths import SandboxViolation
from k3.eval.sandbox.result import RunResult
from k3.eval.sandbox.run import ISOLATIONS, Sandbox

__all__ = ["ISOLATIONS", "Limits", "RunResult", "Sandbox", "SandboxUnavailable", "SandboxViolation"]
