"""One request of a benchmark workload, apart from the workloads that make it (workloads.py) and the images
some carry (images.py), so that each imports it without importing the other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BenchPrompt:
    ids: list[int] | None
    text: str | None
    max_tokens: int
    messages: list[dict] | None = None
    tag: dict = field(default_factory=dict)
    after: int | None = None  # index of the prompt that must finish first (multi-turn)
