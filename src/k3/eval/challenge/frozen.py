"""A challenge's frozen manifest: its version, the sha256 of its repository and of every prompt as the agent
gets it. Loading a challenge checks its prompts against the manifest, and reading its repository checks
the repository's hash, so a prompt or a file edited in place is refused rather than run as the same
challenge; `python -m k3.eval.challenge freeze DIR` writes the manifest, and refuses to give new
prompts or files the old version (a changed prompt is a new version, whose results are never compared
with the old one's)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from k3.eval.challenge.spec import Challenge, ChallengeError

REFREEZE = "raise \"version\" in challenge.json and run `python -m k3.eval.challenge freeze {dir}`"


def tree_sha256(tree: dict[str, bytes]) -> str:
    """sha256 over every (path, content sha256) of a repository, in path order."""
    h = hashlib.sha256()
    for path in sorted(tree):
        h.update(path.encode() + b"\0" + hashlib.sha256(tree[path]).hexdigest().encode() + b"\n")
    return h.hexdigest()


def manifest(challenge: Challenge, tree: dict[str, bytes]) -> dict:
    return {"version": challenge.version, "repository": tree_sha256(tree),
            "prompts": {t.id: challenge.prompt_sha256(t) for t in challenge.every_task}}


def verify_prompts(challenge: Challenge) -> None:
    frozen = challenge.frozen
    if frozen is None:
        return
    if frozen.get("version") != challenge.version:
        raise ChallengeError(f"{challenge.name}: version {challenge.version} was never frozen (the manifest is of "
                             f"version {frozen.get('version')}); run `python -m k3.eval.challenge freeze "
                             f"{challenge.directory}`")
    prompts = frozen.get("prompts") or {}
    for task in challenge.every_task:
        want, got = prompts.get(task.id), challenge.prompt_sha256(task)
        if want != got:
            what = "is new" if want is None else f"was edited in place (sha256 {got[:12]}..., frozen {want[:12]}...)"
            raise ChallengeError(f"{challenge.name}-{challenge.version}: the prompt of task {task.id} {what}: a changed "
                                 f"prompt makes a new challenge version; {REFREEZE.format(dir=challenge.directory)}")


def verify_repository(challenge: Challenge, tree: dict[str, bytes]) -> None:
    want = (challenge.frozen or {}).get("repository")
    if want is not None and tree_sha256(tree) != want:
        raise ChallengeError(f"{challenge.name}-{challenge.version}: its repository does not match the frozen sha256 "
                             f"({tree_sha256(tree)[:12]}..., frozen {want[:12]}...): a file of it changed; restore it, "
                             f"or make a new version: {REFREEZE.format(dir=challenge.directory)}")


def freeze(directory: Path, tree: dict[str, bytes], challenge: Challenge) -> dict:
    """Write the manifest into challenge.json (through a temporary file, then a rename). Refused when the
    prompts or the repository changed but the version did not."""
    path = directory / "challenge.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    new, old = manifest(challenge, tree), raw.get("frozen")
    if old and old.get("version") == new["version"] and old != new:
        raise ChallengeError(f"{challenge.name}: prompts or repository changed but the version is still "
                             f"{challenge.version}: raise \"version\" first (results of the two never compare)")
    raw["frozen"] = new
    from k3.checkpoint.writer import atomic_write_text   # (here: it imports torch, which listing a challenge needs not)

    atomic_write_text(path, json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    return new
