"""Checksum manifests: `{"version": 1, "files": {name: {"size": int, "sha256": hex}}}`.

`k3 verify --write-manifest` writes one; `k3 verify --manifest` and `k3 download --manifest` check
against one. A `sha256sum`-style text file ("<hex>  <name>" per line) is read too, without sizes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.paths import check_member_name
from k3.checkpoint.writer import atomic_write_text

MANIFEST_VERSION = 1
HASH_BLOCK = 8 * 2 ** 20
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class FileDigest:
    size: int | None
    sha256: str | None


def sha256_file(path: str | Path, progress=None) -> str:
    """Hex sha256 of a file, read in 8 MiB blocks; `progress(nbytes)` is called per block."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(HASH_BLOCK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
            if progress:
                progress(n)
    return h.hexdigest()


def parse_manifest(text: str, source: str = "manifest") -> dict[str, FileDigest]:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _parse_json(stripped, source)
    out = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or not SHA256_HEX.match(parts[0].lower()):
            raise CheckpointError(f"{source} line {i} is not '<sha256>  <file>'", file=source)
        name = parts[1].strip().lstrip("*")
        out[check_member_name(name, source=source)] = FileDigest(None, parts[0].lower())
    return out


def _parse_json(text: str, source: str) -> dict[str, FileDigest]:
    try:
        files = json.loads(text)["files"]
        out = {}
        for name, d in files.items():
            size, sha = d.get("size"), d.get("sha256")
            if sha is not None and not SHA256_HEX.match(sha):
                raise ValueError(f"sha256 of {name!r} is not 64 hex digits")
            if size is not None and (not isinstance(size, int) or size < 0):
                raise ValueError(f"size of {name!r} is not a non-negative integer")
            out[check_member_name(name, source=source)] = FileDigest(size, sha)
        return out
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as e:
        raise CheckpointError(f"unreadable manifest ({e})", file=source) from None
    except RecursionError:
        raise CheckpointError("unreadable manifest (JSON nested too deeply)", file=source) from None


def load_manifest(path: str | Path) -> dict[str, FileDigest]:
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"manifest {p} does not exist", file=str(p))
    return parse_manifest(p.read_text(), source=p.name)


def write_manifest(path: str | Path, digests: dict[str, FileDigest]) -> None:
    files = {name: {"size": d.size, "sha256": d.sha256} for name, d in sorted(digests.items())}
    atomic_write_text(Path(path), json.dumps({"version": MANIFEST_VERSION, "files": files}, indent=1) + "\n")
