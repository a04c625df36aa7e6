"""One thread for a model's whole life: it is built there and every step of it runs there.

Why: OpenMP (which ATen and k3's native kernels use) gives each thread that starts parallel work a team of
worker threads of its own. A model loaded on one thread and stepped on another leaves two teams; once
OpenMP's threads outnumber the cores, libgomp stops spinning between parallel regions and every small
parallel op pays a sleep and a wake-up, and decoding slows several times (benchmarks/engine_thread.py;
docs/benchmarks/results.md).

A daemon thread of its own rather than a ThreadPoolExecutor's: the engine loop may block waiting for
work, and an executor's threads are joined at interpreter exit, which would then never come."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future


class EngineThread:
    def __init__(self, name: str = "k3-engine"):
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn, *args, **kwargs) -> Future:
        """fn(*args, **kwargs) queued on the thread (after what is already there) -> its future."""
        future: Future = Future()
        self._work.put((future, fn, args, kwargs))
        return future

    def call(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) on the thread, waited for -> its result (its exception raised here)."""
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        return self.submit(fn, *args, **kwargs).result()

    def _serve(self) -> None:
        while True:
            future, fn, args, kwargs = self._work.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:   # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(e)
