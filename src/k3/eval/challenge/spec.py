"""challenge.json: what a challenge holds, checked on load so a broken one fails with the field it lacks.

    {"name", "version", "canary", "prompt": FILE (a template with {task}, {rules} and {name}),
     "chain_prompt": FILE (a chain's first step: {task}, {rules}, {name}), "step_prompt": FILE (later steps: {task}),
     "source": {"sdist": "NAME==VERSION", "sha256", "root"} | {"directory": DIR},
     "requires": [module names the tests import, from the interpreter's environment],
     "tests": [globs of the repository's test files (default: TESTS)],
     "modules": [the repository's top-level module names (default: found in the repository)],
     "hidden_tests": {path in the repository: FILE}   (judged with every task: pass-to-pass for all),
     "rules": [{"text", "protect": [glob, ...], "keep_api": {module: [name, ...]}, "check": CHECK, "allowed": [...]}],
     "tasks": [TASK], "chains": [{"id", "steps": [TASK, ...]}],
     "frozen": {"version", "repository", "prompts": {task id: sha256}}   (written by `freeze`, frozen.py)}
    TASK = {"id", "kind": "bug" | "feature", "prompt", "seed": [EDIT], "solution": [EDIT],
            "hidden_tests": {path: FILE}, "fail_to_pass": [test id prefix], "pass_to_pass": [prefix, or "*"]}

An EDIT is {"file", "find", "replace"}: `find` must occur exactly once (an empty `find` writes a new file).
A bug's solution defaults to its seed reversed. A chain's steps run in order in one conversation and one
workspace: each step starts from what the agent left, its rules are given once (in the first step's
prompt) and checked at every step. A rule's `protect` globs name files of the pristine repository the
agent must leave alone; its `check` is a static check of the agent's new code (rules.py). Files named
by the challenge are relative to its directory."""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("bug", "feature")
TESTS = ("test_*.py", "*_test.py", "conftest.py", "tests/*", "test/*")
CHALLENGES = Path(__file__).resolve().parents[1] / "data" / "challenges"
BUNDLED = CHALLENGES / "sim3d"
INFLECTION = CHALLENGES / "inflection"


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
    chain: str | None = None              # the chain this task is a step of
    step: int = 0                         # its place in the chain, from 1


@dataclass(frozen=True)
class Chain:
    id: str
    steps: tuple[Task, ...]


@dataclass(frozen=True)
class Rule:
    text: str
    protect: tuple[str, ...] = ()                 # globs of the pristine repository's paths to leave alone
    keep_api: dict[str, list[str]] = field(default_factory=dict)
    check: str | None = None                      # a static check of new code (rules.CHECKS)
    allowed: tuple[str, ...] = ()                 # the check's parameters (the modules "imports" allows)

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
    version: str | None = None
    hidden_tests: dict[str, str] = field(default_factory=dict)
    chains: tuple[Chain, ...] = ()
    templates: dict[str, str] = field(default_factory=dict)     # "chain", "step": their prompt templates
    frozen: dict | None = None

    @property
    def every_task(self) -> tuple[Task, ...]:
        """The independent tasks, then every chain's steps in order."""
        return self.tasks + tuple(s for c in self.chains for s in c.steps)

    @property
    def label(self) -> str:
        """name-version: results of two labels (or two fingerprints) are never compared."""
        return f"{self.name}-{self.version}" if self.version else f"{self.name} (unversioned)"

    def is_test(self, path: str) -> bool:
        """A test file (or test data) of the repository: the judge's, never taken from the agent."""
        name = path.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(path if "/" in g else name, g) for g in self.tests)

    def task(self, task_id: str) -> Task:
        for t in self.every_task:
            if t.id == task_id:
                return t
        raise ChallengeError(f"{self.name}: no task {task_id!r} (it has {', '.join(self.ids())})")

    def chain(self, chain_id: str) -> Chain:
        for c in self.chains:
            if c.id == chain_id:
                return c
        raise ChallengeError(f"{self.name}: no chain {chain_id!r}")

    def ids(self) -> list[str]:
        """What `-T tasks=` takes: task ids and chain ids."""
        return [t.id for t in self.tasks] + [c.id for c in self.chains]

    def prompt(self, task: Task) -> str:
        """The prompt exactly as the agent gets it (its sha256 is frozen)."""
        rules = "\n".join(f"- {r.text}" for r in self.rules)
        if task.chain is None:
            return self.template.format(task=task.prompt.strip(), rules=rules, name=self.name)
        template = self.templates["chain"] if task.step == 1 else self.templates["step"]
        return template.format(task=task.prompt.strip(), rules=rules, name=self.name)

    def prompt_sha256(self, task: Task) -> str:
        return hashlib.sha256(self.prompt(task).encode("utf-8")).hexdigest()

    def fingerprint(self, scorer_files: tuple[Path, ...] = ()) -> str:
        """sha256 over challenge.json, every file it names, and the scorer's source: a change to the data,
        the prompt template or the judging shows as a new fingerprint."""
        h = hashlib.sha256()
        for path in (self.directory / "challenge.json", *self._named_files(), *scorer_files):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return h.hexdigest()

    def _named_files(self) -> list[Path]:
        raw = json.loads((self.directory / "challenge.json").read_text())
        tasks = raw["tasks"] + [s for c in raw.get("chains", []) for s in c["steps"]]
        files = [raw[k] for k in ("prompt", "chain_prompt", "step_prompt") if k in raw]
        files += list(raw.get("hidden_tests", {}).values()) + [f for t in tasks for f in t.get("hidden_tests", {}).values()]
        return [self.directory / f for f in files]


def locate(name_or_path: str | Path | None) -> Path:
    """A bundled challenge's name (sim3d, inflection) or a directory -> the directory (default: sim3d)."""
    if name_or_path is None:
        return BUNDLED
    if (CHALLENGES / str(name_or_path) / "challenge.json").is_file() and "/" not in str(name_or_path):
        return CHALLENGES / str(name_or_path)
    return Path(name_or_path)
