"""What one benchmark request measured. Times are seconds on one monotonic clock (time.perf_counter)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RequestRecord:
    index: int
    prompt_tokens: int
    max_tokens: int
    start: float = 0.0
    first_token: float | None = None    # first token of any kind (reasoning included)
    first_visible: float | None = None  # first answer (non-reasoning) token
    end: float | None = None
    chunk_times: list[float] = field(default_factory=list)  # arrival of each token-bearing chunk
    output_tokens: int = 0
    reasoning_tokens: int = 0
    error: str | None = None
    tag: dict = field(default_factory=dict)  # workload labels: context length, turn, prefix group
    warmup: bool = False

    def token_chunk(self, now: float, visible: bool) -> None:
        """A chunk that carried a token arrived: reasoning (visible False) or answer text / a tool call."""
        self.first_token = self.first_token or now
        if visible and self.first_visible is None:
            self.first_visible = now
        self.chunk_times.append(now)
        self.output_tokens += 1
        self.reasoning_tokens += 0 if visible else 1
        self.end = now

    @property
    def ok(self) -> bool:
        return self.error is None and self.end is not None and self.first_token is not None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    @property
    def ttfvt(self) -> float | None:
        return None if self.first_visible is None else self.first_visible - self.start

    @property
    def e2el(self) -> float | None:
        return None if self.end is None else self.end - self.start

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first (vLLM's definition): (e2el - ttft) / (tokens - 1)."""
        if not self.ok or self.output_tokens < 2:
            return None
        return (self.e2el - self.ttft) / (self.output_tokens - 1)

    @property
    def itl(self) -> list[float]:
        """Gaps between successive token-bearing chunks (vLLM's ITL: per chunk, not per token)."""
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])]

    def to_dict(self) -> dict:
        return asdict(self) | {"ttft": self.ttft, "ttfvt": self.ttfvt, "tpot": self.tpot, "e2el": self.e2el}
