"""The harness's file tools on the workspace, opened so that nothing the sandboxed code does can lead them out.

Every path is walked from a directory fd of the workspace, one component at a time, each opened with
O_NOFOLLOW relative to the fd of the one before (`openat`). A symlink is never followed by the kernel:
its target is read and walked the same way, so an absolute target must lie under the child's view of
the workspace (/workspace under isolation "namespaces") and `..` may not climb above the workspace.
Because each step holds an fd, a directory swapped for a symlink between two tool calls, or during
one, changes nothing: the walk either sees the link (and checks it) or holds the directory it opened.

Files are opened O_NONBLOCK and must be regular files (a FIFO or socket is refused, never waited on);
writes go to a temporary name in the same directory and are renamed over the target; listing is
iterative and bounded, and names that are not UTF-8 are shown with backslash escapes."""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from pathlib import PurePosixPath

MAX_LINKS = 40
MAX_PATH = 4096
MAX_LISTED = 10_000
MAX_DEPTH = 128


class SandboxViolation(ValueError):
    """A tool call tried to reach outside the workspace (path traversal, symlink escape)."""


def printable(name: str) -> str:
    """Text that always encodes as UTF-8: a file name's undecodable bytes, and any lone surrogate, become
    backslash escapes."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _inside_view(path: str, view: str) -> str | None:
    """`path` relative to the child's workspace `view`, or None when it lies outside."""
    if path == view:
        return ""
    return path[len(view) + 1:] if path.startswith(view + "/") else None


class WorkspaceFiles:
    """File operations confined to the workspace whose directory fd is `root_fd` (owned by this object).

    `view` is the workspace's path as the sandboxed code sees it, which is what its absolute symlinks name."""

    def __init__(self, root: str | os.PathLike, view: str):
        self.root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.view = view

    def close(self) -> None:
        if self.root_fd >= 0:
            os.close(self.root_fd)
            self.root_fd = -1

    # -- walking -----------------------------------------------------------------------------------
    def _parts(self, rel: str) -> deque[str]:
        if not isinstance(rel, str) or not rel or "\x00" in rel or len(rel) > MAX_PATH:
            raise SandboxViolation(f"invalid path {rel!r}")
        if rel.startswith("/"):
            inner = _inside_view(rel, self.view)
            if inner is None:
                raise SandboxViolation(f"path {rel!r} is outside the workspace")
            rel = inner
        return deque(PurePosixPath(rel).parts)

    def _walk(self, rel: str, make_dirs: bool = False) -> tuple[int, str]:
        """-> (fd of the directory that holds the last component, that component's name); the caller closes
        the fd. Intermediate links are followed by hand; `make_dirs` creates missing directories."""
        parts, stack, links = self._parts(rel), [os.dup(self.root_fd)], 0
        try:
            while parts:
                part = parts.popleft()
                if part in ("", "."):
                    continue
                if part == "..":
                    if len(stack) == 1:
                        raise SandboxViolation(f"path {rel!r} is outside the workspace")
                    os.close(stack.pop())
                    continue
                if not parts:
                    return stack.pop(), part
                fd, target = self._step(stack[-1], part, make_dirs)
                if fd is not None:
                    stack.append(fd)
                    continue
                links = self._follow(rel, target, parts, stack, links)
            raise SandboxViolation(f"path {rel!r} names the workspace itself, not a file in it")
        finally:
            for fd in stack:
                os.close(fd)

    def _step(self, dir_fd: int, part: str, make_dirs: bool) -> tuple[int | None, str]:
        """Open directory `part` under `dir_fd` without following a link -> (fd, "") or (None, link target)."""
        flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(part, flags, dir_fd=dir_fd), ""
        except FileNotFoundError:
            if not make_dirs:
                raise FileNotFoundError(errno.ENOENT, "no such directory in the workspace", part) from None
            try:
                os.mkdir(part, 0o755, dir_fd=dir_fd)
            except FileExistsError:
                pass
            return self._step(dir_fd, part, False)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        try:
            return None, os.readlink(part, dir_fd=dir_fd)
        except OSError:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", part) from None

    def _follow(self, rel: str, target: str, parts: deque, stack: list[int], links: int) -> int:
        """Queue a link's target in `parts` (an absolute one restarts from the workspace) -> the new link count."""
        links += 1
        if links > MAX_LINKS:
            raise SandboxViolation(f"path {rel!r}: too many symbolic links")
        if target.startswith("/"):
            inner = _inside_view(target, self.view)
            if inner is None:
                raise SandboxViolation(f"path {rel!r} links outside the workspace ({target})")
            while len(stack) > 1:
                os.close(stack.pop())
            target = inner
        parts.extendleft(reversed(PurePosixPath(target).parts))
        return links

    def _open_file(self, rel: str, flags: int) -> tuple[int, int, str]:
        """-> (fd of the regular file, fd of its directory, its name); the final link is followed by hand."""
        for _ in range(MAX_LINKS + 1):
            dir_fd, name = self._walk(rel)
            try:
                fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
            except OSError as e:
                if e.errno != errno.ELOOP:
                    os.close(dir_fd)
                    raise
                target = os.readlink(name, dir_fd=dir_fd)
                os.close(dir_fd)
                if target.startswith("/"):
                    if _inside_view(target, self.view) is None:
                        raise SandboxViolation(f"path {rel!r} links outside the workspace ({target})") from None
                    rel = target
                else:
                    rel = str(PurePosixPath(rel).parent / target)
                continue
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                os.close(dir_fd)
                raise IsADirectoryError(errno.EISDIR, "not a regular file", rel)
            return fd, dir_fd, name
        raise SandboxViolation(f"path {rel!r}: too many symbolic links")

    # -- the tools ---------------------------------------------------------------------------------
    def read(self, rel: str, limit: int) -> bytes:
        fd, dir_fd, _ = self._open_file(rel, os.O_RDONLY)
        os.close(dir_fd)
        with os.fdopen(fd, "rb") as f:
            return f.read(limit)

    def snapshot(self, skip: tuple[str, ...], file_limit: int, total_limit: int) -> dict[str, bytes]:
        """Regular files (a link read through to its target) by raw name -> bytes; pipes, sockets and dangling
        or directory links are left out. More names than MAX_LISTED is an error, never a silent cut.

        Every name counts its file's bytes, so a file reached through many hard or symbolic links counts
        once per name, and past `total_limit` (the workspace's cap) the snapshot stops with an error: one
        16 MiB file and 10,000 links cannot cost the harness 156 GiB. Names of one file share one bytes
        object, so what is held stays within the cap."""
        names, cut = self.list(skip, shown=str)    # raw names (undecodable bytes as surrogates): each file opens
        if cut:
            raise SandboxViolation(f"the workspace holds more than {MAX_LISTED} files or is deeper than {MAX_DEPTH} "
                                   "directories; it cannot be taken whole")
        out, read, total = {}, {}, 0
        for rel in names:
            try:
                fd, dir_fd, _ = self._open_file(rel, os.O_RDONLY)
            except (OSError, SandboxViolation):
                continue
            os.close(dir_fd)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                total += min(st.st_size, file_limit)
                if total > total_limit:
                    raise SandboxViolation(f"the workspace's files, counted once per name (links included), hold "
                                           f"more than {total_limit:,} bytes; it cannot be taken whole")
                inode = (st.st_dev, st.st_ino)
                if inode not in read:
                    read[inode] = f.read(file_limit)
            out[rel] = read[inode]
        return out

    def write(self, rel: str, data: bytes) -> None:
        """Replace the file's content atomically: a temporary file in the same directory, renamed over it."""
        try:
            fd, dir_fd, name = self._open_file(rel, os.O_RDONLY)
            os.close(fd)
        except FileNotFoundError:
            dir_fd, name = self._walk(rel, make_dirs=True)
        try:
            tmp = f".k3-write-{os.getpid()}-{os.urandom(4).hex()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dir_fd)
                except OSError:
                    pass
                raise
        finally:
            os.close(dir_fd)

    def list(self, skip: tuple[str, ...] = ("__pycache__",), limit: int = MAX_LISTED, shown=printable) -> tuple[list[str], bool]:
        """Regular files and links under the workspace, never following a link -> (sorted names, cut short).
        Depth-first without recursion, holding one fd a level: at most MAX_DEPTH levels and `limit` names.
        `shown` makes each name component text (printable by default; the snapshot keeps the raw name)."""
        found, cut = [], False
        stack: list[tuple[int, str, list[str]]] = []

        def enter(fd: int, prefix: str) -> None:
            try:
                entries = self._entries(fd)
            except BaseException:
                os.close(fd)
                raise
            found.extend(prefix + shown(n) for n, is_dir in entries if not is_dir)
            stack.append((fd, prefix, sorted((n for n, is_dir in entries if is_dir and n not in skip), reverse=True)))

        try:
            enter(os.dup(self.root_fd), "")
            while stack and len(found) <= limit:
                fd, prefix, subdirs = stack[-1]
                if not subdirs:
                    os.close(stack.pop()[0])
                    continue
                name = subdirs.pop()
                if len(stack) >= MAX_DEPTH:
                    cut = True
                    continue
                try:
                    sub = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError:
                    continue
                enter(sub, prefix + shown(name) + "/")
        finally:
            cut = cut or bool(stack)
            for fd, _, _ in stack:
                os.close(fd)
        return sorted(found[:limit]), cut or len(found) > limit

    @staticmethod
    def _entries(fd: int) -> list[tuple[str, bool]]:
        """(name, is a real directory) of the directory open at `fd` (an O_PATH fd is reopened)."""
        real = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        try:
            with os.scandir(real) as it:
                return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        finally:
            os.close(real)
