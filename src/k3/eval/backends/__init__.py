"""What a task talks to: a local k3 model or an OpenAI-compatible endpoint, behind one interface."""

from k3.eval.backends.base import Backend, BackendError, Completion, LoglikUnsupported

__all__ = ["Backend", "BackendError", "Completion", "LoglikUnsupported"]
