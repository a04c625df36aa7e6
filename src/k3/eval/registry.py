"""`--tasks` names -> task objects: built-in sets by name, file-based tasks as kind:PATH."""

from __future__ import annotations

from k3.eval.sandbox import namespaces
from k3.eval.tasks.agent import AgentTask
from k3.eval.tasks.base import Settings
from k3.eval.tasks.code import CodeTask
from k3.eval.tasks.constraints import ConstraintTask
from k3.eval.tasks.generation import GenerationTask
from k3.eval.tasks.humaneval import HumanEvalTask
from k3.eval.tasks.likelihood import MultipleChoiceTask, PerplexityTask
from k3.eval.tasks.refusal import RefusalTask

BUILTIN = ("refusal", "agent", "code", "constraints", "humaneval")
FILE_KINDS = {"perplexity": PerplexityTask, "mc": MultipleChoiceTask, "gen": GenerationTask}


def make_tasks(spec: str, settings: Settings, isolation: str = "namespaces") -> list:
    """`isolation`: the sandbox's for agent, code and humaneval tasks (see k3.eval.sandbox.Sandbox);
    checked here, before any item runs, so a machine without bubblewrap fails at once with what to install."""
    tasks = []
    for name in [s.strip() for s in spec.split(",") if s.strip()]:
        kind, _, path = name.partition(":")
        if kind in FILE_KINDS:
            if not path:
                raise ValueError(f"--tasks {kind} needs a file: {kind}:PATH")
            tasks.append(FILE_KINDS[kind](path))
        elif kind == "refusal":
            tasks.append(RefusalTask(path) if path else RefusalTask())
        elif kind == "humaneval":
            tasks.append(HumanEvalTask(path or None, samples=settings.samples, isolation=_sandbox_ready(isolation)))
        elif name == "agent":
            tasks.append(AgentTask(isolation=_sandbox_ready(isolation)))
        elif name == "code":
            tasks.append(CodeTask(isolation=_sandbox_ready(isolation)))
        elif name == "constraints":
            tasks.append(ConstraintTask(lengths=settings.constraint_lengths))
        else:
            raise ValueError(f"unknown task {name!r}: built-in tasks are {', '.join(BUILTIN)}; "
                             f"file tasks are {', '.join(k + ':PATH' for k in FILE_KINDS)}, refusal:PATH, humaneval:PATH")
    if not tasks:
        raise ValueError("--tasks is empty")
    return tasks


def _sandbox_ready(isolation: str) -> str:
    if isolation == "namespaces":
        try:
            namespaces.require()
        except namespaces.SandboxUnavailable as e:
            raise ValueError(f"the agent, code and humaneval tasks run model-written code in a sandbox: {e}") from None
    return isolation
