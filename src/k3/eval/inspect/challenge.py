"""`k3/challenge`: the fixed-repository agent challenge as an Inspect AI task, in k3's sandbox.

Each sample is one task of the challenge: the agent gets the task's starting repository in /workspace,
the frozen prompt (template + task + rules) and Inspect's tools (bash, python, text_editor), and works
until it answers without a tool call or reaches the message limit. The verdict is taken afterwards,
apart (challenge/verdict.py): a fresh sandbox from the starting repository plus the agent's changes,
tests it could not touch. `epochs` repeats each task: pass@k and pass^k for every k <= epochs.
Interventions come through Inspect's approval (`--approval human`, or `k3/scripted` rules)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import Score, Target, accuracy, pass_at, pass_k, scorer, stderr
from inspect_ai.solver import Generate, TaskState, generate, solver, use_tools
from inspect_ai.tool import bash, python
from inspect_ai.util import sandbox

from k3.eval.challenge import source, spec, verdict
from k3.eval.inspect.editor import text_editor
from k3.eval.inspect.sampling import stratified
from k3.eval.inspect.sandbox_env import K3SandboxEnvironment
from k3.eval.inspect.task_args import listed
from k3.eval.sandbox import JUDGE_SOURCES
from k3.eval.sandbox.paths import SandboxViolation, printable

# Everything that decides a verdict: a change to any of them makes a new fingerprint.
SCORER_FILES = tuple(Path(m.__file__) for m in (verdict, source, spec)) + (Path(__file__),) + JUDGE_SOURCES
TOOL_TIMEOUT = 180


@task
def challenge(path: str | None = None, tasks: str | None = None, epochs: int = 1, message_limit: int = 60,
              limit: int | None = None) -> Task:
    """`path`: a challenge directory (default: the bundled inflection-0.5.1); `tasks`: comma-separated ids;
    `limit`: that many tasks drawn across kinds (bugs and features)."""
    ch = spec.load(path or spec.BUNDLED)
    chosen = [ch.task(t) for t in listed(tasks)] if tasks else list(ch.tasks)
    chosen = stratified(chosen, (lambda t: t.kind,), limit)
    base = source.pristine(ch)
    starts = {t.id: source.start(ch, t, base) for t in chosen}
    dataset = MemoryDataset([Sample(id=t.id, input=ch.prompt(t), metadata={"kind": t.kind}) for t in chosen],
                            name=ch.name)
    reducers = ["mean"] + [r(k) for k in range(2, epochs + 1) for r in (pass_at, pass_k)]
    return Task(dataset=dataset, setup=checkout(starts),
                solver=[use_tools(bash(TOOL_TIMEOUT), python(TOOL_TIMEOUT), text_editor()), generate()],
                scorer=tests_after(str(ch.directory), starts), sandbox="k3", message_limit=message_limit,
                epochs=Epochs(epochs, reducers) if epochs > 1 else None,
                metadata={"challenge": ch.name, "fingerprint": ch.fingerprint(SCORER_FILES), "canary": ch.canary,
                          "rules": [r.text for r in ch.rules]})


@solver
def checkout(starts: dict[str, dict[str, bytes]]):
    """The task's starting repository, written into the sample's sandbox."""
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        for rel, data in starts[str(state.sample_id)].items():
            await sandbox().write_file(rel, data)
        return state

    return solve


@scorer(metrics={"passed": [accuracy(), stderr()], "resolved": [accuracy()], "rules_kept": [accuracy()]})
def tests_after(directory: str, starts: dict[str, dict[str, bytes]]):
    """passed = resolved (every required test passes) and rules kept (no protected file touched, the
    public API whole); the diff is the answer, the verdict's details the metadata."""
    ch = spec.load(directory)

    async def score(state: TaskState, target: Target) -> Score:
        box = sandbox().as_type(K3SandboxEnvironment).sandbox
        start = starts[str(state.sample_id)]
        try:
            final = await asyncio.to_thread(box.snapshot)
        except SandboxViolation as e:       # a workspace that cannot be taken whole cannot pass
            return Score(value={"passed": 0.0, "resolved": 0.0, "rules_kept": 1.0}, explanation=str(e),
                         metadata={"group": str(state.sample_id), "error": str(e)})
        found = await asyncio.to_thread(verdict.judge, ch, ch.task(str(state.sample_id)), start, final)
        value = {"passed": float(found["resolved"] and found["rules_kept"]),
                 "resolved": float(found["resolved"]), "rules_kept": float(found["rules_kept"])}
        return Score(value=value, answer=found["diff"], explanation=_explain(found),
                     metadata={"group": str(state.sample_id), **{k: found[k] for k in ("broken", "error")},
                               "failing": found["failing"][:50], "n_failing": len(found["failing"]),
                               "changed": [printable(p) for p in verdict.changed(start, final)]})

    return score


def _explain(found: dict) -> str:
    if found["error"]:
        return found["error"]
    parts = [f"{len(found['failing'])} required tests failing" if found["failing"] else "all required tests pass"]
    parts += [f"rule broken: {b['rule']} ({b['path']})" for b in found["broken"]]
    return "; ".join(parts)
