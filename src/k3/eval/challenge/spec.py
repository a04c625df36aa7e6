"""challenge.json: what a challenge holds, checked on load so a broken one fails with the field it lacks.

    {"name", "canary", "prompt": FILE (a template with {task} and {rules}),
     "source": {"sdist": "NAME==VERSION", "sha256", "root"} | {"directory": DIR},
     "requires": [module names the tests import, from the interpreter's environment],
     "tests": [globs of the repository's test files (default: TESTS)],
     "modules": [the repository's top-level module names (default: found in the repository)],
     "rules": [{"text", "protect": [glob, ...]} | {"text", "keep_api": {module: [name, ...]}}],
     "tasks": [{"id", "kind": "bug" | "feature", "prompt", "seed": [EDIT], "solution": [EDIT],
                "hidden_tests": {path in the repository: FILE}, "fail_to_pass": [test id prefix],
                "pass_to_pass": [test id prefix, or "*" for every other test]}]}

An EDIT is {"file", "find", "replace"}: `find` must occur exactly once. A bug's solution defaults to its
seed reversed. Files named by the challenge are relative to its directory. A glob without a "/" matches
a file's name anywhere, one with a "/" its path: test files are what the judge runs, always as the
challenge shipped them."""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("bug", "feature")
TESTS = ("test_*.py", "*_test.py", "conftest.py", "tests/*", "test/*")
BUNDLED = Path(__file__).resolve().parents[1] / "data" / "challenges" / "inflection"


class ChallengeError(ValueError):
    """A challenge directory that cannot be used, with the file and field at fault."""


@dataclass(frozen=True)
class Edit:
    file: str
    find: str
    replace: str

    def reversed(self) -> "Edit":
        return Edit(self.file, self.replace, self.find)


@dataclass(frozen=True)
class Task:
    id: str
    kind: str
    prompt: str
    seed: tuple[Edit, ...]
    solution: tuple[Edit, ...]
    hidden_tests: dict[str, str]          # path in the repository -> source, added only when judging
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    text: str
    protect: tuple[str, ...] = ()                 # globs of paths the agent must leave alone
    keep_api: dict[str, list[str]] = field(default_factory=dict)

    def protects(self, path: str) -> bool:
        return any(fnmatch.fnmatch(path, g) for g in self.protect)


@dataclass(frozen=True)
class Challenge:
    directory: Path
    name: str
    canary: str
    template: str
    source: dict
    requires: tuple[str, ...]
    rules: tuple[Rule, ...]
    tasks: tuple[Task, ...]
    tests: tuple[str, ...] = TESTS
    modules: tuple[str, ...] = ()

    def is_test(self, path: str) -> bool:
        """A test file (or test data) of the repository: the judge's, never taken from the agent."""
        name = path.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(path if "/" in g else name, g) for g in self.tests)

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise ChallengeError(f"{self.name}: no task {task_id!r} (it has {', '.join(t.id for t in self.tasks)})")

    def prompt(self, task: Task) -> str:
        rules = "\n".join(f"- {r.text}" for r in self.rules)
        return self.template.format(task=task.prompt.strip(), rules=rules, name=self.name)

    def fingerprint(self, scorer_files: tuple[Path, ...] = ()) -> str:
        """sha256 over challenge.json, every file it names, and the scorer's source: a change to the data,
        the prompt template or the judging shows as a new fingerprint."""
        h = hashlib.sha256()
        for path in (self.directory / "challenge.json", *self._named_files(), *scorer_files):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return h.hexdigest()

    def _named_files(self) -> list[Path]:
        raw = json.loads((self.directory / "challenge.json").read_text())
        files = [raw["prompt"]] + [f for t in raw["tasks"] for f in t.get("hidden_tests", {}).values()]
        return [self.directory / f for f in files]


def load(directory: str | Path) -> Challenge:
    directory = Path(directory)
    path = directory / "challenge.json"
    if not path.is_file():
        raise ChallengeError(f"{directory}: no challenge.json (a challenge is a directory holding one)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ChallengeError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    need = _needs(raw, path)
    tasks = tuple(_task(t, directory, f"{path}: tasks[{i}]") for i, t in enumerate(need("tasks", list)))
    ids = [t.id for t in tasks]
    if not tasks or len(set(ids)) != len(ids):
        raise ChallengeError(f"{path}: tasks must be a non-empty list with distinct ids")
    source = need("source", dict)
    if not ({"sdist", "sha256", "root"} <= source.keys() or "directory" in source):
        raise ChallengeError(f'{path}: source needs {{"sdist", "sha256", "root"}} or {{"directory"}}')
    tests, modules = raw.get("tests", TESTS), raw.get("modules", ())
    for key, value in (("tests", tests), ("modules", modules)):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
            raise ChallengeError(f"{path}: field {key!r} must be a list of non-empty strings")
    return Challenge(directory, need("name", str), need("canary", str), _read(directory, need("prompt", str), path),
                     source, tuple(raw.get("requires", ())), tuple(_rule(r, path) for r in raw.get("rules", ())), tasks,
                     tuple(tests), tuple(modules))


def _needs(raw, where):
    def need(key: str, kind: type):
        value = raw.get(key) if isinstance(raw, dict) else None
        if not isinstance(value, kind):
            raise ChallengeError(f"{where}: field {key!r} must be a {kind.__name__}")
        return value

    return need


def _task(raw: dict, directory: Path, where: str) -> Task:
    need = _needs(raw, where)
    kind = need("kind", str)
    if kind not in KINDS:
        raise ChallengeError(f"{where}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    seed = tuple(_edit(e, where) for e in raw.get("seed", ()))
    solution = tuple(_edit(e, where) for e in raw.get("solution", ())) or tuple(e.reversed() for e in reversed(seed))
    if not solution:
        raise ChallengeError(f"{where}: a feature needs a reference solution (the challenge is checked with it)")
    hidden = {rel: _read(directory, f, where) for rel, f in raw.get("hidden_tests", {}).items()}
    return Task(need("id", str), kind, need("prompt", str), seed, solution, hidden,
                tuple(need("fail_to_pass", list)), tuple(raw.get("pass_to_pass", ["*"])))


def _edit(raw, where: str) -> Edit:
    need = _needs(raw, f"{where} edit")
    return Edit(need("file", str), need("find", str), need("replace", str))


def _rule(raw, where) -> Rule:
    need = _needs(raw, f"{where}: rules")
    return Rule(need("text", str), tuple(raw.get("protect", ())), dict(raw.get("keep_api", {})))


def _read(directory: Path, name: str, where) -> str:
    path = directory / name
    if not path.is_file():
        raise ChallengeError(f"{where}: names {name}, which is not a file in {directory}")
    return path.read_text(encoding="utf-8")
