"""What every task shares: the run's settings, the context a task runs in, and content hashing."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Protocol

from k3.eval.backends.base import Backend, Completion

HARNESS_VERSION = "1"
RUN_SEED = object()  # Context.ask: use the run's seed


@dataclass(frozen=True)
class Settings:
    max_tokens: int = 32768          # reasoning models need room; truncated answers are flagged, not scored
    temperature: float = 0.0
    seed: int | None = 0
    agent_steps: int = 12
    constraint_lengths: tuple[int, ...] = (0, 4, 16, 48)
    samples: int = 1                 # humaneval: answers drawn per problem (pass@k needs k <= samples)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Context:
    backend: Backend
    settings: Settings
    judge: Backend | None = None
    notes: list[str] = field(default_factory=list)

    def ask(self, messages: list[dict], tools: list[dict] | None = None, *,
            seed: int | None | object = RUN_SEED) -> Completion:
        """One chat turn with the run's settings; `seed` overrides the run's (a task drawing several samples)."""
        s = self.settings
        return self.backend.chat(messages, tools=tools, max_tokens=s.max_tokens, temperature=s.temperature,
                                 seed=s.seed if seed is RUN_SEED else seed)


class Task(Protocol):
    name: str

    def items(self) -> list[dict]:
        """Every item, each with a unique "id"."""

    def fingerprint(self) -> str:
        """sha256 of the task's frozen content (prompts, files, checks): recorded in the report."""

    def run(self, item: dict, ctx: Context) -> dict: ...

    def summarise(self, records: list[dict]) -> dict: ...


class ItemsTask:
    """A task whose frozen content is its list of items (subclasses set `self._items`)."""
    _items: list[dict]

    def items(self) -> list[dict]:
        return self._items

    def fingerprint(self) -> str:
        return content_hash(self._items)


def content_hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def turn_record(c: Completion) -> dict:
    """The parts of a completion every chat task keeps."""
    return {"answer": c.content, "reasoning": c.reasoning, "finish_reason": c.finish_reason, "truncated": c.truncated,
            "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens}
