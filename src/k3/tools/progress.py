"""Progress for long operations: a bar (rich) on a terminal; off one (CI logs, pipes), a line on stderr
about every 10 % and one at the end, so a log shows the operation moving without a line per item.
`enabled=False` silences both; None picks by whether stderr is a terminal."""

from __future__ import annotations

import contextlib
import sys
import time


class ProgressLines:
    """One stderr line each time `done` crosses another tenth of `total`, and one when it ends."""

    def __init__(self, label: str, total: int | None, fmt=str):
        self.label, self.total, self.fmt = label, total, fmt
        self.done, self.shown, self.start = 0, 0, time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.total:
            return
        tenth = min(10, self.done * 10 // self.total)
        if tenth > self.shown and tenth < 10:
            self.shown = tenth
            self._line(f"{self.done * 100 // self.total} %")     # the share done, not the tenth just crossed

    def finish(self) -> None:
        self._line(f"done in {time.monotonic() - self.start:.1f} s")

    def _line(self, what: str) -> None:
        of = f"/{self.fmt(self.total)}" if self.total else ""
        print(f"{self.label}: {what} ({self.fmt(self.done)}{of})", file=sys.stderr, flush=True)


def gigabytes(n: int | None) -> str:
    return f"{(n or 0) / 1e9:.2f} GB"


@contextlib.contextmanager
def _lines(label: str, total: int | None, fmt):
    """Yields `advance([n])`; the closing line only when the block ends without an error."""
    lines = ProgressLines(label, total, fmt)
    yield lines.advance
    lines.finish()


@contextlib.contextmanager
def byte_progress(label: str, total: int | None = None, enabled: bool | None = None):
    """Yields `tick(nbytes)`. On a terminal: bytes, bytes/s and ETA; elsewhere: lines (see module)."""
    if enabled is False:
        yield lambda n: None
        return
    if not sys.stderr.isatty():
        with _lines(label, total, gigabytes) as tick:
            yield tick
        return
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


@contextlib.contextmanager
def count_progress(label: str, total: int, enabled: bool | None = None):
    """Yields `tick()`, one per finished item; a bar with rate and ETA on a terminal, lines elsewhere."""
    if enabled is False:
        yield lambda: None
        return
    if not sys.stderr.isatty():
        with _lines(label, total, str) as tick:
            yield tick
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)
