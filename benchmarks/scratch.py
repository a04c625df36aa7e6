"""Scratch directories for the benchmarks' generated checkpoints (1-3 GB each): removed when the process
exits, so repeated runs do not fill the disk."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path
