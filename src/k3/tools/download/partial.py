"""A file being downloaded: `<dest>/.k3-download/<name>.part` plus a JSON state of finished chunks.

Chunks are written with positioned writes (any order, any thread), flushed to disk, and only then
recorded, so after a kill or crash every recorded chunk is really on disk and a restart fetches
only the rest. The final name appears only through `finish()` (rename after verification).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from k3.checkpoint.paths import writable_member_path
from k3.checkpoint.writer import atomic_write_text

WORK_DIR = ".k3-download"


class PartialFile:
    def __init__(self, dest: Path, name: str, size: int | None, sha256: str | None, chunk: int,
                 validator: str | None = None):
        """`validator`: the mirror's version of the file (ETag or Last-Modified). Saved chunks are resumed only
        for the same version, and, when no sha256 will check the result, only when there is a version at all:
        a resume across a swapped file would give a mix of both."""
        self.name, self.size, self.sha256, self.validator = name, size, sha256, validator
        self.final = writable_member_path(dest, name, source="the download list")
        work = writable_member_path(dest, f"{WORK_DIR}/{name}", source="the download list")
        self.part = work.with_name(work.name + ".part")
        self.state = work.with_name(work.name + ".state.json")
        self.chunk = chunk
        self.num_chunks = max(1, -(-size // self.chunk)) if size else 1
        self.lock = threading.Lock()
        self.part.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[int] = self._load_state()
        self.fd = os.open(self.part, os.O_RDWR | os.O_CREAT, 0o644)
        if size is not None and os.fstat(self.fd).st_size != size:
            os.ftruncate(self.fd, size)

    def _load_state(self) -> set[int]:
        try:
            s = json.loads(self.state.read_text())
            if self.sha256 is None and self.validator is None:
                return set()
            same = (s["size"], s["chunk"], s["sha256"], s.get("validator")) == (self.size, self.chunk, self.sha256,
                                                                                self.validator)
            if same and self.part.is_file():
                return {i for i in s["done"] if 0 <= i < self.num_chunks}
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return set()

    def chunk_range(self, i: int) -> tuple[int, int | None]:
        if self.size is None:
            return 0, None
        return i * self.chunk, min(self.size, (i + 1) * self.chunk)

    def missing(self) -> list[int]:
        return [i for i in range(self.num_chunks) if i not in self.done]

    @property
    def complete(self) -> bool:
        return len(self.done) == self.num_chunks

    def write(self, offset: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, offset)
            view, offset = view[n:], offset + n

    def mark(self, first: int, last: int) -> None:
        """Record every chunk lying wholly inside the bytes [first, last) written so far."""
        if self.size is None:  # a mirror that sent no length: one chunk, now known
            self.size, self.chunk = last, max(last, 1)
        covered = [i for i in range(self.num_chunks)
                   if first <= self.chunk_range(i)[0] and (self.chunk_range(i)[1] or last) <= last]
        if not covered:
            return
        os.fdatasync(self.fd)
        with self.lock:
            self.done.update(covered)
            body = {"size": self.size, "chunk": self.chunk, "sha256": self.sha256, "validator": self.validator,
                    "done": sorted(self.done)}
            atomic_write_text(self.state, json.dumps(body))

    def reset(self) -> None:
        """Forget everything (after a failed verification): the next attempt starts from zero."""
        with self.lock:
            self.done.clear()
            self.state.unlink(missing_ok=True)

    def finish(self) -> Path:
        os.fsync(self.fd)
        os.close(self.fd)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.part, self.final)
        self.state.unlink(missing_ok=True)
        return self.final

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
