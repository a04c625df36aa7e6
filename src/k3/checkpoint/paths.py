"""Names that come from a checkpoint (index entries, manifest entries, download lists) become paths
only through `member_path`, which keeps them inside the checkpoint directory."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from k3.checkpoint.errors import CheckpointError
from k3.config import env

ALLOW_SYMLINKS_ENV = "K3_ALLOW_EXTERNAL_SYMLINKS"


def check_member_name(name: str, *, source: str = "the index") -> str:
    """Reject names that could point outside a directory: absolute, `..`, backslashes, NUL, empty parts."""
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name:
        raise CheckpointError(f"{source} names a file {name!r} that is not a plain relative path; refusing it",
                              file=str(name))
    p = PurePosixPath(name)
    if p.is_absolute() or any(part in ("..", ".", "") for part in name.split("/")):
        raise CheckpointError(f"{source} names a file {name!r} outside the checkpoint directory; refusing it "
                              "(the index is corrupt or hostile)", file=name)
    return name


def member_path(root: str | Path, name: str, *, source: str = "the index",
                allow_external_symlinks: bool | None = None) -> Path:
    """root/name after checking the name, and refusing a path that a symlink (the file itself or any
    directory on the way) takes outside root (set K3_ALLOW_EXTERNAL_SYMLINKS=1 for layouts such as a
    Hugging Face cache snapshot; a download never honours it, see `writable_member_path`)."""
    check_member_name(name, source=source)
    root = Path(root)
    path = root / name
    if allow_external_symlinks is None:
        allow_external_symlinks = env.switch(ALLOW_SYMLINKS_ENV, False)
    if not allow_external_symlinks:
        # Resolved whether or not the file exists yet: a symlinked directory on the way (root/sub -> /elsewhere)
        # would otherwise put a file that is about to be written outside root.
        real, real_root = path.resolve(), root.resolve()
        if real != real_root and real_root not in real.parents:
            raise CheckpointError(
                f"{name} resolves to {real} through a symlink, outside the checkpoint directory; refusing it. For a "
                f"Hugging Face cache snapshot (blobs/ next to snapshots/) set {ALLOW_SYMLINKS_ENV}=1", file=name)
    return path


def writable_member_path(root: str | Path, name: str, *, source: str = "the download list") -> Path:
    """member_path for a file about to be written: symlinks out of root are refused whatever the environment."""
    return member_path(root, name, source=source, allow_external_symlinks=False)
