"""What the server may ask of the engine, and nothing more (vLLM's `EngineClient`): the routes, the info
endpoints and the app talk to this interface, never to the LLMEngine or the model behind it. AsyncEngine is
the one implementation; a test double need only provide these."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol


class EngineClient(Protocol):
    metrics: Any                    # serve/metrics.Metrics: the Prometheus series the engine's outputs feed
    dead: str | None                # why the engine stopped for good, else None

    @property
    def running(self) -> bool: ...            # its thread still steps the engine

    @property
    def in_flight(self) -> int: ...           # requests being generated

    @property
    def max_model_len(self) -> int: ...       # prompt + completion tokens the engine can hold for one request

    @property
    def model_config(self) -> Any: ...        # the model's K3Config (vocab_size, special token ids, ...)

    @property
    def has_vision(self) -> bool: ...         # the model takes images

    def reserve(self, n: int) -> Any: ...     # places for n requests together (a Ticket), or QueueFull

    def generate(self, prompt_ids: list[int], params, ticket=None, images=None) -> AsyncIterator: ...

    def stats(self) -> Mapping[str, Any]: ...  # the published statistics (any thread)

    def fingerprint(self) -> str: ...         # identifies the weights (computed once; slow the first time)

    def encode_images(self, images: list) -> list: ...   # prepared images with their rows through the tower

    def on_stop(self, callback: Callable[[str], None]) -> None: ...   # called once, with the reason, if it dies
