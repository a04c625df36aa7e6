"""challenge.json read into a Challenge (spec.py), every field checked, so a broken challenge fails on load
with the file and the field at fault."""

from __future__ import annotations

import json
from pathlib import Path

from k3.eval.challenge.rules import CHECKS
from k3.eval.challenge.spec import KINDS, TESTS, Chain, Challenge, ChallengeError, Edit, Rule, Task


def challenge(directory: Path) -> Challenge:
    path = directory / "challenge.json"
    if not path.is_file():
        raise ChallengeError(f"{directory}: no challenge.json (a challenge is a directory holding one)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ChallengeError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    need = _needs(raw, path)
    tasks = tuple(_task(t, directory, f"{path}: tasks[{i}]") for i, t in enumerate(need("tasks", list)))
    chains = tuple(_chain(c, directory, f"{path}: chains[{i}]") for i, c in enumerate(raw.get("chains", [])))
    ids = [t.id for t in tasks] + [c.id for c in chains] + [s.id for c in chains for s in c.steps]
    if not (tasks or chains) or len(set(ids)) != len(ids):
        raise ChallengeError(f"{path}: tasks and chains must hold at least one task, all ids distinct")
    source = need("source", dict)
    if not ({"sdist", "sha256", "root"} <= source.keys() or "directory" in source):
        raise ChallengeError(f'{path}: source needs {{"sdist", "sha256", "root"}} or {{"directory"}}')
    tests, modules = raw.get("tests", TESTS), raw.get("modules", ())
    for key, value in (("tests", tests), ("modules", modules)):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise ChallengeError(f"{path}: field {key!r} must be a list of non-empty strings")
    templates = {k: _read(directory, raw[f"{k}_prompt"], path) for k in ("chain", "step") if f"{k}_prompt" in raw}
    if chains and len(templates) != 2:
        raise ChallengeError(f'{path}: a challenge with chains needs "chain_prompt" and "step_prompt" files')
    version = raw.get("version")
    if version is not None and not isinstance(version, (str, int)):
        raise ChallengeError(f"{path}: field 'version' must be a string or a number")
    return Challenge(directory, need("name", str), need("canary", str), _read(directory, need("prompt", str), path),
                     source, tuple(raw.get("requires", ())), tuple(_rule(r, path) for r in raw.get("rules", ())), tasks,
                     tuple(tests), tuple(modules), None if version is None else str(version),
                     _hidden(raw.get("hidden_tests", {}), directory, path), chains, templates, raw.get("frozen"))


def _needs(raw, where):
    def need(key: str, kind: type):
        value = raw.get(key) if isinstance(raw, dict) else None
        if not isinstance(value, kind):
            raise ChallengeError(f"{where}: field {key!r} must be a {kind.__name__}")
        return value

    return need


def _task(raw: dict, directory: Path, where: str, chain: str | None = None, step: int = 0) -> Task:
    need = _needs(raw, where)
    kind = need("kind", str)
    if kind not in KINDS:
        raise ChallengeError(f"{where}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    seed = tuple(_edit(e, where) for e in raw.get("seed", ()))
    if seed and chain:
        raise ChallengeError(f"{where}: a chain's step starts from the step before it and has no seed")
    solution = tuple(_edit(e, where) for e in raw.get("solution", ())) or tuple(e.reversed() for e in reversed(seed))
    if not solution:
        raise ChallengeError(f"{where}: a feature needs a reference solution (the challenge is checked with it)")
    return Task(need("id", str), kind, need("prompt", str), seed, solution,
                _hidden(raw.get("hidden_tests", {}), directory, where), tuple(need("fail_to_pass", list)),
                tuple(raw.get("pass_to_pass", ["*"])), chain, step)


def _chain(raw, directory: Path, where: str) -> Chain:
    need = _needs(raw, where)
    chain_id = need("id", str)
    steps = tuple(_task(s, directory, f"{where}.steps[{i}]", chain_id, i + 1) for i, s in enumerate(need("steps", list)))
    if not steps:
        raise ChallengeError(f"{where}: a chain needs at least one step")
    return Chain(chain_id, steps)


def _hidden(raw, directory: Path, where) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ChallengeError(f"{where}: hidden_tests must map a path in the repository to a file")
    return {rel: _read(directory, f, where) for rel, f in raw.items()}


def _edit(raw, where: str) -> Edit:
    need = _needs(raw, f"{where} edit")
    return Edit(need("file", str), need("find", str), need("replace", str))


def _rule(raw, where) -> Rule:
    need = _needs(raw, f"{where}: rules")
    check = raw.get("check")
    if check is not None and check not in CHECKS:
        raise ChallengeError(f"{where}: rule check {check!r} is not one of {', '.join(CHECKS)}")
    return Rule(need("text", str), tuple(raw.get("protect", ())), dict(raw.get("keep_api", {})), check,
                tuple(raw.get("allowed", ())))


def _read(directory: Path, name: str, where) -> str:
    path = directory / name
    if not path.is_file():
        raise ChallengeError(f"{where}: names {name}, which is not a file in {directory}")
    return path.read_text(encoding="utf-8")
