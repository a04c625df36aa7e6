"""The repository a challenge works on, as a tree {relative path: bytes}: the pristine project (a pinned sdist
from the package index, through fetch.py, or a directory shipped with the challenge, checked against its
frozen sha256), and each task's reference start: the pristine tree with the task's seeded edits, or for
a chain's step, with the reference solutions of the steps before it."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass

from k3.eval import fetch
from k3.eval.challenge import frozen
from k3.eval.challenge.spec import Challenge, ChallengeError, Edit, Task

Tree = dict[str, bytes]
SKIPPED = ("__pycache__/", ".pytest_cache/", ".egg-info/", ".pyc", "PKG-INFO")   # by-products, not the project


def pin(challenge: Challenge) -> fetch.Pinned:
    return fetch.Pinned(challenge.source["sdist"], challenge.source["sha256"], "sdist")


def pristine(challenge: Challenge) -> Tree:
    if "directory" in challenge.source:
        root = challenge.directory / challenge.source["directory"]
        if not root.is_dir():
            raise ChallengeError(f"{challenge.name}: its repository {root} is not a directory")
        tree = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and not _skipped(p.relative_to(root).as_posix())}
        frozen.verify_repository(challenge, tree)
        return tree
    prefix = challenge.source["root"].rstrip("/") + "/"
    tree = {}
    try:
        sdist = fetch.path(pin(challenge))
    except fetch.FetchError as e:
        raise ChallengeError(f"{challenge.name}: {e}") from None
    with tarfile.open(sdist) as tar:
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



@dataclass(frozen=True)
class Job:
    """One judged unit: a task or a chain's step, its reference start, the pristine repository, and the hidden
    tests in force (the challenge's, the task's, and a step's predecessors')."""
    challenge: Challenge
    task: Task
    start: Tree
    pristine: Tree
    hidden: dict[str, str]


def jobs(challenge: Challenge, base: Tree | None = None) -> dict[str, Job]:
    """task id -> Job, for every task and every chain's step."""
    base = pristine(challenge) if base is None else base
    out = {t.id: Job(challenge, t, start(challenge, t, base), base, {**challenge.hidden_tests, **t.hidden_tests})
           for t in challenge.tasks}
    for chain in challenge.chains:
        tree, hidden = base, dict(challenge.hidden_tests)
        for step in chain.steps:
            hidden = {**hidden, **step.hidden_tests}
            out[step.id] = Job(challenge, step, tree, base, hidden)
            tree = apply(tree, step.solution, f"{challenge.name}/{step.id} solution")
    return out
