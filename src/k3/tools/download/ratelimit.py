"""A token bucket shared by all download threads (bytes per second; None = unlimited)."""

from __future__ import annotations

import threading
import time


class RateLimit:
    def __init__(self, bytes_per_s: float | None, burst_s: float = 0.25):
        self.rate = bytes_per_s
        self.capacity = (bytes_per_s or 0) * burst_s
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def take(self, n: int) -> None:
        """Block until `n` bytes may pass (debt is allowed, so a large read never waits forever)."""
        if not self.rate:
            return
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            self.tokens -= n
            wait = -self.tokens / self.rate if self.tokens < 0 else 0.0
        if wait:
            time.sleep(wait)
