"""Is a downloaded file what it should be? sha256 when known (manifest, or the mirror's X-Linked-ETag);
otherwise the exact size plus a structural check (safetensors header and length, JSON parses).
A record of verified files lets a restart skip re-hashing finished files."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.header import read_header
from k3.checkpoint.manifest import sha256_file
from k3.checkpoint.writer import atomic_write_text


class VerifyFailed(Exception):
    pass


def check_file(path: Path, name: str, size: int | None, sha256: str | None) -> str:
    """Raise VerifyFailed naming the problem; returns how the file was checked."""
    actual = path.stat().st_size
    if size is not None and actual != size:
        raise VerifyFailed(f"{name}: {actual:,} bytes, expected {size:,}")
    if sha256:
        got = sha256_file(path)
        if got != sha256:
            raise VerifyFailed(f"{name}: sha256 {got[:16]}... != expected {sha256[:16]}... (corrupt bytes)")
        return "sha256"
    if name.endswith(".safetensors"):
        try:
            read_header(path, name=name)
        except CheckpointError as e:
            raise VerifyFailed(str(e)) from None
        return "size + safetensors header"
    if name.endswith(".json"):
        try:
            json.loads(path.read_bytes())
        except (ValueError, UnicodeDecodeError) as e:
            raise VerifyFailed(f"{name}: not valid JSON ({e})") from None
        return "size + JSON"
    return "size"


class VerifiedRecord:
    """`.k3-download/verified.json`: name -> [size, mtime_ns, sha256] of files finished and checked."""

    def __init__(self, work_dir: Path):
        self.path = work_dir / "verified.json"
        self.lock = threading.Lock()
        try:
            self.entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.entries = {}

    def matches(self, final: Path, name: str, size: int | None, sha256: str | None) -> bool:
        if not final.is_file():
            return False
        st = final.stat()
        rec = self.entries.get(name)
        return (rec is not None and rec[0] == st.st_size and rec[1] == st.st_mtime_ns
                and (size is None or size == st.st_size) and (sha256 is None or rec[2] == sha256))

    def add(self, final: Path, name: str, sha256: str | None) -> None:
        st = os.stat(final)
        with self.lock:
            self.entries[name] = [st.st_size, st.st_mtime_ns, sha256]
            # the work folder exists only once a file was fetched: a folder whose files were all
            # already there (a checkpoint copied in, or from another tool) has none yet
            self.path.parent.mkdir(exist_ok=True)
            atomic_write_text(self.path, json.dumps(self.entries))
