"""Resolve a path the model names against the workspace without ever leaving it.

`os.path.realpath` cannot be used: under isolation "namespaces" the harness reaches the workspace
through /proc/PID/root, a link realpath turns into "/" (the harness's own root), and a symlink the
model made means what it means inside the sandbox, where the workspace is /workspace. So links are
followed by hand, component by component: an absolute target must lie under the child's view of
the workspace, and `..` may not climb above it."""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path, PurePosixPath

MAX_LINKS = 40


class SandboxViolation(ValueError):
    """A tool call tried to reach outside the workspace (path traversal, symlink escape)."""


def _inside_view(path: str, view: str) -> str | None:
    """`path` relative to the child's workspace `view`, or None when it lies outside."""
    if path == view:
        return ""
    return path[len(view) + 1:] if path.startswith(view + "/") else None


def resolve_inside(base: Path, rel: str, view: str) -> Path:
    """`rel` (relative, or absolute under `view`) as a path under `base`; anything outside raises."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise SandboxViolation(f"invalid path {rel!r}")
    if rel.startswith("/"):
        inner = _inside_view(rel, view)
        if inner is None:
            raise SandboxViolation(f"path {rel!r} is outside the workspace")
        rel = inner
    parts, current, links = deque(PurePosixPath(rel).parts), [], 0
    while parts:
        part = parts.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not current:
                raise SandboxViolation(f"path {rel!r} is outside the workspace")
            current.pop()
            continue
        candidate = base.joinpath(*current, part)
        if not candidate.is_symlink():
            current.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise SandboxViolation(f"path {rel!r}: too many symbolic links")
        target = os.readlink(candidate)
        if target.startswith("/"):
            inner = _inside_view(target, view)
            if inner is None:
                raise SandboxViolation(f"path {rel!r} links outside the workspace ({target})")
            current, target = [], inner
        parts.extendleft(reversed(PurePosixPath(target).parts))
    return base.joinpath(*current)
