"""Fetch one chunk of one file, retrying with backoff and failing over between mirrors."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import httpx

from k3.tools.download.http import Changed, FetchError, fetch
from k3.tools.download.partial import PartialFile
from k3.tools.download.ratelimit import RateLimit


@dataclass
class FileJob:
    partial: PartialFile
    bad_mirrors: set[int] = field(default_factory=set)  # mirrors that lack the file or serve another version
    pinned: int | None = None  # after a failed verification, one mirror at a time
    tried_pinned: set[int] = field(default_factory=set)
    error: str | None = None


@dataclass
class Counters:
    bytes: int = 0
    retries: int = 0
    failovers: int = 0
    events: list[str] = field(default_factory=list)


class ChunkFetcher:
    def __init__(self, client: httpx.Client, mirrors: list[str], limit: RateLimit, retries: int, backoff: float,
                 counters: Counters, tick, log):
        self.client, self.mirrors, self.limit = client, mirrors, limit
        self.retries, self.backoff = retries, backoff
        self.counters, self.tick, self.log = counters, tick, log

    def mirror_for(self, job: FileJob, chunk: int, attempt: int) -> int | None:
        if job.pinned is not None:
            return job.pinned
        usable = [i for i in range(len(self.mirrors)) if i not in job.bad_mirrors]
        return usable[(chunk + attempt) % len(usable)] if usable else None

    def run(self, job: FileJob, chunk: int) -> bool:
        """Fetch chunk `chunk` of `job`; False (with job.error set) when every attempt failed."""
        pf = job.partial
        start, end = pf.chunk_range(chunk)
        cur, attempt, last_mirror = start, 0, None
        while end is None or cur < end:
            m = self.mirror_for(job, chunk, attempt)
            if m is None:
                job.error = job.error or f"{pf.name}: no mirror can serve it"
                return False
            if last_mirror is not None and m != last_mirror:
                self.counters.failovers += 1
            last_mirror = m
            span = [None, None]

            def sink(offset: int, data: bytes) -> None:
                if span[0] is None:
                    span[0] = offset
                pf.write(offset, data)
                span[1] = offset + len(data)
                self.counters.bytes += len(data)
                self.tick(len(data))

            try:
                fetch(self.client, self.mirrors[m], pf.name, cur, end, pf.size, sink, self.limit, pf.validator)
                error = None
            except Changed as e:   # the saved chunks are of another version: the next run starts over
                pf.reset()
                job.error = f"{pf.name}: {e}"
                return False
            except FetchError as e:
                error = e
            if span[0] is not None and span[0] <= cur and span[1] > cur:
                pf.mark(span[0], span[1])
                cur = span[1]
            if error is None:
                if end is None:
                    pf.mark(0, cur)
                    return True
                if cur >= end:
                    break
                error = FetchError(f"{self.mirrors[m]}: response for {pf.name} ended at byte {cur:,} of {end:,}")
            attempt += 1
            if not self._handle(job, m, error, attempt):
                return False
        pf.mark(start, end)
        return True

    def _handle(self, job: FileJob, mirror: int, error: FetchError, attempt: int) -> bool:
        self.counters.events.append(str(error))
        if not error.retryable:
            job.bad_mirrors.add(mirror)
            if job.pinned == mirror or len(job.bad_mirrors) >= len(self.mirrors):
                job.error = f"{job.partial.name}: {error}"
                return False
        if attempt > self.retries:
            job.error = f"{job.partial.name}: gave up after {attempt} attempts; last error: {error}"
            return False
        self.counters.retries += 1
        delay = min(30.0, self.backoff * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
        self.log(f"retrying {job.partial.name} in {delay:.1f}s ({error})")
        time.sleep(delay)
        return True
