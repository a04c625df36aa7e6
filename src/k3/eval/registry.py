"""`--tasks` names -> task objects: built-in sets by name, file-based tasks as kind:PATH."""

from __future__ import annotations

from k3.eval.tasks.agent import AgentTask
from k3.eval.tasks.base import Settings
from k3.eval.tasks.code import CodeTask
from k3.eval.tasks.constraints import ConstraintTask
from k3.eval.tasks.generation import GenerationTask
from k3.eval.tasks.likelihood import MultipleChoiceTask, PerplexityTask
from k3.eval.tasks.refusal import RefusalTask

BUILTIN = ("refusal", "agent", "code", "constraints")
FILE_KINDS = {"perplexity": PerplexityTask, "mc": MultipleChoiceTask, "gen": GenerationTask}


def make_tasks(spec: str, settings: Settings) -> list:
    tasks = []
    for name in [s.strip() for s in spec.split(",") if s.strip()]:
        kind, _, path = name.partition(":")
        if kind in FILE_KINDS:
            if not path:
                raise ValueError(f"--tasks {kind} needs a file: {kind}:PATH")
            tasks.append(FILE_KINDS[kind](path))
        elif name == "refusal":
            tasks.append(RefusalTask())
        elif name == "agent":
            tasks.append(AgentTask())
        elif name == "code":
            tasks.append(CodeTask())
        elif name == "constraints":
            tasks.append(ConstraintTask(lengths=settings.constraint_lengths))
        else:
            raise ValueError(f"unknown task {name!r}: built-in tasks are {', '.join(BUILTIN)}; "
                             f"file tasks are {', '.join(k + ':PATH' for k in FILE_KINDS)}")
    if not tasks:
        raise ValueError("--tasks is empty")
    return tasks
