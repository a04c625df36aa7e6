"""Run untrusted model-written code: a fresh workspace, a child process with CPU, memory, process,
file-size and output limits, no network, and nothing outside the workspace writable."""

from k3.eval.sandbox.limits import Limits
from k3.eval.sandbox.run import RunResult, Sandbox, SandboxViolation

__all__ = ["Limits", "RunResult", "Sandbox", "SandboxViolation"]
