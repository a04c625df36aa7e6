"""`once`: a function of no arguments computed on its first call, then returned as it was.

functools.lru_cache does the same for eager code, but torch.compile (Dynamo) ignores its cache and traces
the function's body, so a first-call probe (reading /proc/cpuinfo, building the kernels) would run inside
the trace and break it. The value here sits in a closure cell, which Dynamo reads as a constant and guards.
`cache_clear()` forgets it (tests that change the environment)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def once(fn: Callable[[], T]) -> Callable[[], T]:
    held: list = []

    @functools.wraps(fn)
    def value() -> T:
        if not held:
            held.append(fn())
        return held[0]

    value.cache_clear = held.clear
    return value
