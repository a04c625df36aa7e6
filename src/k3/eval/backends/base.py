"""The interface every evaluated model offers, and what one chat turn returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol


class BackendError(RuntimeError):
    """The model could not answer (HTTP error, unreadable response, engine failure)."""


class LoglikUnsupported(BackendError):
    """The backend cannot score given text (an endpoint that returns no prompt logprobs)."""


@dataclass
class Completion:
    """One assistant turn. `tool_calls`: [{"id", "name", "arguments"}] with arguments as the raw JSON text."""
    content: str
    reasoning: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    finish_reason: str | None = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def truncated(self) -> bool:
        """Stopped by the token limit: the answer may be cut off, so it is flagged, not scored."""
        return self.finish_reason == "length"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Completion":
        return cls(**d)

    def as_message(self) -> dict:
        """The assistant message to append to a conversation (OpenAI shape)."""
        msg: dict = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in self.tool_calls]
        return msg


class Backend(Protocol):
    def identity(self) -> dict:
        """What is evaluated, for the report and the judge check: {"kind", "model", ...}."""

    def chat(self, messages: list[dict], *, tools: list[dict] | None = None, max_tokens: int,
             temperature: float, seed: int | None) -> Completion: ...

    def complete(self, prompt: str, *, max_tokens: int, temperature: float, seed: int | None,
                 stop: list[str]) -> Completion:
        """A raw text completion of `prompt` (no chat format), ending before the first of `stop`."""

    def loglikelihood(self, context: str, continuation: str) -> tuple[float, int]:
        """(sum of log p(continuation tokens | context), number of continuation tokens)."""

    def loglikelihood_rolling(self, text: str) -> tuple[float, int]:
        """(sum of log p over every token of text, token count), windowed as the backend needs."""
