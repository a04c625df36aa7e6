"""Bridge between asyncio request handlers and the (synchronous, single-threaded) LLMEngine.

The engine runs on one background thread that owns it: handlers never call it directly but send
commands (add, abort) through a thread-safe queue; outputs come back to each request's asyncio
queue with `call_soon_threadsafe`. One engine loop serves every client (continuous batching).
An LLMEngine has at most one AsyncEngine driving it: a second one, while the first runs, is refused
(two threads stepping one engine would corrupt it).
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import AsyncIterator

from k3.engine.thread import EngineThread
from k3.engine.engine import LLMEngine
from k3.engine.request import RequestOutput, SamplingParams


class QueueFull(Exception):
    """More requests are waiting than the server accepts (HTTP 429)."""


class AdmissionFailed(Exception):
    """The engine raised something other than a validation error while admitting one request (HTTP 500)."""


class EngineUnavailable(Exception):
    """The engine thread has stopped for good (HTTP 503); `/health` says so and the server exits non-zero."""


class AsyncEngine:
    def __init__(self, engine: LLMEngine, max_queued: int = 64, metrics=None, thread: EngineThread | None = None):
        """thread: the EngineThread the model was built on, to step it there too (engine/thread.py says why);
        a new one otherwise."""
        if engine.driver is not None and engine.driver.running:
            raise RuntimeError("this LLMEngine is already driven by another AsyncEngine (a server running on it); "
                               "shut that one down first, or give this server its own LLM")
        engine.driver = self
        self.engine = engine
        if metrics is None:
            from k3.serve.metrics import Metrics

            metrics = Metrics()
        self.metrics = metrics
        self.max_queued = max_queued
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._ids = itertools.count()
        self._pending = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.dead: str | None = None          # why the engine thread stopped for good
        self.on_death = None                  # called (from the engine thread) once it has
        self._thread = thread or EngineThread()
        self._loop_done = self._thread.submit(self._loop)

    @property
    def running(self) -> bool:
        """Its thread still steps the engine."""
        return not self._loop_done.done()

    @property
    def in_flight(self) -> int:
        return len(self._streams)

    # -- what the server asks of the model (serve/engine_client.py): read-only, safe from any thread -------------
    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    @property
    def model_config(self):
        return self.engine.model.config

    @property
    def has_vision(self) -> bool:
        return getattr(self.engine.model, "vision", None) is not None

    def stats(self):
        return self.engine.stats_snapshot()

    def fingerprint(self) -> str:
        return self.engine.fingerprint

    def encode_images(self, images: list) -> list:
        """Each prepared image with its rows through the vision tower, computed in the calling thread (the
        server's image pool), so the engine's thread only places them."""
        from dataclasses import replace

        from k3.media.image import stack_images

        model = self.engine.model
        out = []
        for image in images:
            pixels, grid = stack_images([image])
            [rows] = model.encode_images(pixels.to(next(model.parameters()).device), grid)
            out.append(replace(image, rows=rows))
        return out

    def on_stop(self, callback) -> None:
        """`callback(reason)` is called once, from the engine's thread, if the engine stops for good."""
        self.on_death = callback

    def reserve(self, n: int) -> "Ticket":
        """Admit `n` requests (every choice of one client request) all together, or none: QueueFull when they
        do not all fit. Each place is then taken by one `generate(..., ticket=)`; close the ticket when done
        so that places never taken (a sibling failed first) are given back. A request of more choices than
        the queue has places (n > max_queued) could never fit, and retrying would never cure its 429: it
        takes every place instead, and its choices run in turns, each later one taking the place of one
        that finished (as vLLM runs them)."""
        places = max(1, min(n, self.max_queued))
        with self._lock:
            if self.dead is not None:
                raise EngineUnavailable(f"the engine has stopped: {self.dead}")
            waiting = self._pending + self.engine.stats_snapshot()["waiting"]
            if waiting + places > self.max_queued:
                raise QueueFull(f"{waiting} requests are waiting and this one needs {places} more places "
                                f"(limit {self.max_queued})")
            self._pending += places
        return Ticket(self, places, n)

    def _release(self, n: int) -> None:
        with self._lock:
            self._pending -= n

    def _take_back(self) -> None:
        """A later turn's choice takes again the place a finished sibling gave up (see `reserve`)."""
        with self._lock:
            self._pending += 1

    async def generate(self, prompt_ids: list[int], params: SamplingParams,
                       ticket: "Ticket | None" = None, images: list | None = None) -> AsyncIterator[RequestOutput]:
        """Yields outputs as tokens arrive; leaving the iterator early (client gone) aborts the request.
        `ticket`: a place reserved with its siblings (`reserve`); without one, a place is reserved here.
        A choice of a later turn waits here until an earlier one has finished."""
        ticket = ticket or self.reserve(1)
        await ticket.take()
        turn_held = True       # until this choice finishes
        request_id = f"srv-{next(self._ids)}"
        outputs: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = (asyncio.get_running_loop(), outputs)
        done = asyncio.get_running_loop().create_future()
        self._commands.put(("add", request_id, prompt_ids, params, done, images))
        try:
            await done   # raises the engine's ValueError for a bad request
            last = time.perf_counter()
            first = True
            while True:
                out = await outputs.get()
                self._observe(out, time.perf_counter() - last, first)
                last, first = time.perf_counter(), False
                if out.finished:
                    ticket.done()       # the next turn may start while this output is read
                    turn_held = False
                yield out
                if out.finished:
                    return
        finally:
            if turn_held:
                ticket.done()
            self._streams.pop(request_id, None)
            self._commands.put(("abort", request_id))

    def _observe(self, out: RequestOutput, elapsed: float, first: bool) -> None:
        if self.metrics is None or not out.new_token_ids:
            return
        (self.metrics.ttft if first else self.metrics.itl).observe(elapsed)
        self.metrics.tokens.inc(len(out.new_token_ids))

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._drain(block=not self.engine.has_unfinished())
                for out in self.engine.step() if self.engine.has_unfinished() else []:
                    self._deliver(out)
        except BaseException as e:   # EngineDead, or a failure outside step(): never a silent stop
            self._die(f"{type(e).__name__}: {e}")

    def _deliver(self, out: RequestOutput) -> None:
        stream = self._streams.get(out.request_id)
        if stream is not None:
            stream[0].call_soon_threadsafe(stream[1].put_nowait, out)

    def _die(self, reason: str) -> None:
        """Fail every request still waiting on this engine, refuse new ones, and tell the server."""
        import logging

        logging.getLogger("k3.serve").error("the engine thread stopped for good: %s", reason)
        with self._lock:
            self.dead = reason
        for request_id in list(self._streams):
            self._deliver(RequestOutput(request_id, [], [], [], None, True, "error",
                                        error=f"the engine stopped: {reason}"))
        while True:
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                break
            if cmd[0] == "add" and cmd[1] in self._streams:
                loop = self._streams[cmd[1]][0]
                loop.call_soon_threadsafe(_settle, cmd[4], cmd[4].set_exception,
                                          EngineUnavailable(f"the engine has stopped: {reason}"))
        if self.on_death is not None:
            self.on_death(reason)

    def _drain(self, block: bool) -> None:
        while True:
            try:
                cmd = self._commands.get(timeout=0.05) if block else self._commands.get_nowait()
            except queue.Empty:
                return
            block = False
            if cmd[0] == "add":
                self._add(*cmd[1:])
            elif cmd[0] == "abort":
                self.engine.abort(cmd[1])
            elif cmd[0] == "stop":
                return

    def _add(self, request_id, prompt_ids, params, done, images=None) -> None:
        loop = self._streams[request_id][0] if request_id in self._streams else None
        with self._lock:
            self._pending -= 1
        try:
            self.engine.add_request(prompt_ids, params, request_id=request_id, images=images)
            result = (done.set_result, None)
        except ValueError as e:
            result = (done.set_exception, e)
        except Exception as e:   # noqa: BLE001 - one request that cannot be admitted fails alone, never the loop
            import logging

            logging.getLogger("k3.serve").exception("admitting request %s failed", request_id)
            result = (done.set_exception, AdmissionFailed(f"the engine could not admit this request: "
                                                          f"{type(e).__name__}: {e}"))
        if loop is not None:
            loop.call_soon_threadsafe(_settle, done, *result)

    def shutdown(self) -> None:
        self._stop.set()
        self._commands.put(("stop",))
        try:
            self._loop_done.result(timeout=5)
        except Exception:   # noqa: BLE001 - a loop that ended with an error has ended; `dead` says why
            pass
        if self.engine.driver is self and not self.running:
            self.engine.driver = None


class Ticket:
    """Places in the engine's queue reserved together for `choices` requests: at most `places` of them are
    in flight at once (places < choices only for a request of more choices than the queue holds)."""

    def __init__(self, engine: AsyncEngine, places: int, choices: int):
        self.engine, self.left, self.places, self.choices = engine, places, places, choices
        self._turns: asyncio.Semaphore | None = None

    async def take(self) -> None:
        """Wait for a turn, then use a reserved place, or (a later turn) the place a finished choice left."""
        if self.choices <= 0:
            raise RuntimeError("more requests started than places reserved")
        self.choices -= 1
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.places)
        await self._turns.acquire()
        if self.left > 0:
            self.left -= 1
        else:
            self.engine._take_back()

    def done(self) -> None:
        """A choice has finished (or left): its turn passes on. Called once per `take`."""
        self._turns.release()

    def close(self) -> None:
        if self.left:
            self.engine._release(self.left)
            self.left = 0

    def __enter__(self) -> "Ticket":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _settle(future: asyncio.Future, setter, value) -> None:
    if not future.done():
        setter(value)
