"""Files and directories k3 trusts because only this user can write them: the key that signs saved state
(engine/state_file.py) and the prefix cache's spill directory (engine/prefix/spill.py).

One set of checks for both, so a hole closed for one is closed for the other: a trusted directory is
owned by this user and writable by nobody else; a trusted file is a regular file (never a symlink,
FIFO or device: opened O_NOFOLLOW | O_NONBLOCK, so a FIFO cannot hang the open), owned by this user,
readable by nobody else. A key is at least MIN_KEY_BYTES long (a one-byte or empty key is forgeable
by trying every value). Every refusal names the path, what is wrong and the command that fixes it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MIN_KEY_BYTES = 32
MAKE_KEY = "python -c 'import secrets; print(secrets.token_hex(32))'"


class NotPrivate(ValueError):
    """A file or directory k3 would trust is not this user's alone (or is not a file at all)."""


def check_dir(path: Path, what: str, tighten: bool = False) -> None:
    """`path` (a directory; a symlink to one is followed) is owned by this user and writable by nobody else.
    tighten=True removes group and other permissions from a directory of ours (made by hand) instead of
    refusing it: right for a directory k3 owns outright, like the spill directory."""
    st = path.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise NotPrivate(f"{what} {path}: not a directory")
    if st.st_uid != os.geteuid():
        raise NotPrivate(f"{what} {path}: owned by another user (uid {st.st_uid}); k3 will not trust what "
                         "someone else can write: use a directory of your own")
    if st.st_mode & 0o077 and tighten:
        os.chmod(path, st.st_mode & 0o700)
    elif st.st_mode & 0o022:
        raise NotPrivate(f"{what} {path}: other users may write there (mode {st.st_mode & 0o777:o}), so they can "
                         f"replace what k3 trusts; run `chmod go-w {path}`")


def check_file(st: os.stat_result, path: Path, what: str, secret: bool = True) -> None:
    """The checks on a file's own status (from fstat or lstat): regular, this user's, and (secret=True, for a
    key) readable by nobody else; a file in a private directory need not be secret itself."""
    if stat.S_ISLNK(st.st_mode):
        raise NotPrivate(f"{what} {path}: a symbolic link; k3 reads it only from a regular file of its own")
    if not stat.S_ISREG(st.st_mode):
        raise NotPrivate(f"{what} {path}: not a regular file")
    if st.st_uid != os.geteuid():
        raise NotPrivate(f"{what} {path}: owned by another user (uid {st.st_uid}); delete it, and k3 makes a new one")
    if secret and st.st_mode & 0o077:
        raise NotPrivate(f"{what} {path}: others may read or write it (mode {st.st_mode & 0o777:o}); it is no "
                         f"longer secret: delete it (k3 makes a new one), or `chmod 600 {path}` if no one has")


def read_file(path: Path, what: str, limit: int = 4096) -> bytes:
    """The bytes of a trusted file (at most `limit`); FileNotFoundError when there is none. Its directory
    must pass check_dir, or someone else could swap the file after this read."""
    check_dir(path.parent, f"the folder of the {what}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:   # the last component is a symlink (O_NOFOLLOW)
            raise NotPrivate(f"{what} {path}: a symbolic link; k3 reads it only from a regular file of its own") \
                from None
        raise NotPrivate(f"{what} {path}: cannot be read ({e.strerror}); fix its permissions or delete it") from None
    try:
        check_file(os.fstat(fd), path, what)
        return os.read(fd, limit)
    finally:
        os.close(fd)


def check_key(key: bytes, source: str) -> bytes:
    """`key` when it is long enough to sign with, else a NotPrivate naming `source` and how to make one."""
    if len(key) < MIN_KEY_BYTES:
        raise NotPrivate(f"{source} is {len(key)} bytes; a signing key needs at least {MIN_KEY_BYTES} (a short "
                         f"key can be guessed and used to forge state files). Make one with {MAKE_KEY}")
    return key
