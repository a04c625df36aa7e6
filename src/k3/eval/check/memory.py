"""This process's resident memory over a run (the engine's, when the model is served here): sampled from
/proc every `interval` seconds by a daemon thread, for the report's memory-over-time plot and its peak."""

from __future__ import annotations

import threading
import time

from k3.tools.proc_memory import rss


class RssSampler:
    def __init__(self, interval: float = 0.25):
        self.interval, self.samples = interval, []     # (seconds since start, bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="k3-rss")
        self._start = time.perf_counter()

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(2)
        self._take()

    def _take(self) -> None:
        value = rss()
        if value is not None:
            self.samples.append((round(time.perf_counter() - self._start, 3), value))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._take()
