"""A line on the server's log every INTERVAL_S while it has work, as vLLM and llama-server log theirs: requests
running and waiting, prompt and generation throughput since the last line, and, when one engine step has run
for long (a CPU prefill of a long prompt), for how long, so a silent minute reads as work, not a hang.

It reads only the engine's published statistics (`EngineClient.stats`, replaced whole after every step), from a
thread of its own: a step that runs for minutes cannot hold it up."""

from __future__ import annotations

import logging
import threading
import time

INTERVAL_S = 10.0
log = logging.getLogger("k3.serve.activity")


class ActivityLog:
    def __init__(self, engine, interval_s: float = INTERVAL_S):
        """engine: the EngineClient (its published stats); the first line comes interval_s after start()."""
        self.engine, self.interval_s = engine, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = self.engine.stats()
        self._last_t = self._changed_t = time.monotonic()

    def start(self) -> "ActivityLog":
        self._thread = threading.Thread(target=self._run, name="k3-activity-log", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            line = self.line(time.monotonic())
            if line:
                log.info(line)

    def line(self, now: float) -> str | None:
        """The line for the interval ending `now`, or None when the server was idle all along."""
        snap = self.engine.stats()
        if snap is not self._last:
            self._changed_t = now
        seconds = max(now - self._last_t, 1e-9)
        prompt = (snap.get("prompt_tokens", 0) - self._last.get("prompt_tokens", 0)) / seconds
        generated = (snap.get("generated_tokens", 0) - self._last.get("generated_tokens", 0)) / seconds
        running, waiting = snap.get("running", 0), snap.get("waiting", 0)
        self._last, self._last_t = snap, now
        if not (running or waiting or prompt or generated):
            return None
        text = (f"running {running}, waiting {waiting}; prompt {prompt:.1f} tokens/s, generation {generated:.1f} "
                f"tokens/s over the last {seconds:.0f} s")
        step = now - self._changed_t
        if running and step >= self.interval_s:
            text += f"; the current step has run for {step:.0f} s"
        return text
