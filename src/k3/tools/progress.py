"""A byte-counting progress bar (rich) on a terminal; silent otherwise, so logs and tests stay clean."""

from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def byte_progress(label: str, total: int | None = None, enabled: bool | None = None):
    """Yields `tick(nbytes)`. Shows bytes, bytes/s and ETA when stderr is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda n: None
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
    """Yields `tick()`, one per finished item; a bar with rate and ETA on a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)
