"""Write a manifest (size + sha256) of every file a checkpoint directory holds."""

from __future__ import annotations

from pathlib import Path

from k3.checkpoint.manifest import FileDigest, sha256_file, write_manifest


def checkpoint_files(root: Path, exclude: Path | None = None) -> list[Path]:
    """Regular top-level files, not hidden, not symlinks; the manifest itself excluded."""
    return [p for p in sorted(root.iterdir())
            if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
            and (exclude is None or p.resolve() != exclude.resolve())]


def write_checkpoint_manifest(root: str | Path, out: str | Path, progress=None) -> int:
    root, out = Path(root), Path(out)
    digests = {p.name: FileDigest(p.stat().st_size, sha256_file(p, progress))
               for p in checkpoint_files(root, exclude=out)}
    write_manifest(out, digests)
    return len(digests)
