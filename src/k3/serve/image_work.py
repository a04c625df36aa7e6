"""Image preparation apart from everything else a server does: decoding, resizing and patching run in a pool
of their own, whose threads run at a lower CPU priority (so the engine's thread and text requests keep
the CPU), with a bound on the requests whose images are being prepared or waiting. Past the bound a
request gets a 429 at once instead of queueing image work nobody bounded (six clients of heavy images
once made a text-only chat wait 283 s). Every limit a header can answer is checked before decoding
(engine/image_prompts.prepare_all), so admitted work is bounded work."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from k3.serve.async_engine import QueueFull

NICE = 10          # the pool's threads' priority below the server's (Linux takes it per thread)


class ImagesBusy(QueueFull):
    """Image work is saturated (HTTP 429, Retry-After)."""


class ImageWork:
    def __init__(self, workers: int = 1, waiting: int = 4):
        """`workers`: threads preparing images; `waiting`: requests whose images may wait for one."""
        if workers < 1 or waiting < 0:
            raise ValueError("--image-workers must be at least 1 and --image-queue at least 0")
        self.bound, self.taken, self.lock = workers + waiting, 0, threading.Lock()
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="k3-images", initializer=_lower_priority)

    async def run(self, fn, *args):
        """fn(*args) in the pool; ImagesBusy when `workers + waiting` requests already hold a place. A place
        is given back when the work ends, not when its client leaves (the work still runs until then)."""
        with self.lock:
            if self.taken >= self.bound:
                raise ImagesBusy(f"{self.taken} requests' images are being prepared or waiting (the server's bound: "
                                 "--image-workers + --image-queue); retry shortly, or send smaller images")
            self.taken += 1
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._held, fn, args)

    def _held(self, fn, args):
        try:
            return fn(*args)
        finally:
            with self.lock:
                self.taken -= 1

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _lower_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (OSError, AttributeError):
        pass          # not Linux, or not allowed: the bound still holds
