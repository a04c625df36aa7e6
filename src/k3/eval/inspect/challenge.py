"""`k3/challenge`: the fixed-repository agent challenge as an Inspect AI task, in k3's sandbox.

A sample is a task of the challenge (one step), or a chain (its steps in order, in one conversation and
one workspace): the agent gets the starting repository in /workspace, the frozen prompt and Inspect's
tools (bash, python, text_editor), and works as agent_loop.py says; each step is judged apart as soon as
it is done (challenge/verdict.py). The log holds the challenge's version, fingerprint and every prompt's
sha256, and each sample the records of its steps (turns, tokens, context, interventions, hallucinations,
sandbox and judge time). `epochs` repeats each sample: pass@k and pass^k for every k <= epochs."""

from __future__ import annotations

from pathlib import Path

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import Score, Target, accuracy, pass_at, pass_k, scorer, stderr
from inspect_ai.solver import TaskState

from k3.eval.challenge import frozen, loading, parse, rules, source, spec, verdict
from k3.eval.inspect import agent_loop, step_interventions
from k3.eval.inspect.sampling import stratified
from k3.eval.inspect.task_args import listed
from k3.eval.sandbox import JUDGE_SOURCES

# Everything that decides a verdict: a change to any of them makes a new fingerprint.
SCORER_FILES = tuple(Path(m.__file__) for m in (verdict, source, spec, parse, rules, frozen, agent_loop)) + (
    Path(__file__),) + JUDGE_SOURCES


@task
def challenge(path: str | None = None, tasks: str | None = None, epochs: int = 1, turns: int = 40,
              limit: int | None = None, interventions: str | None = None, interactive: bool = False) -> Task:
    """`path`: a challenge directory or a bundled challenge's name (default: sim3d); `tasks`: comma-separated
    task or chain ids; `limit`: that many samples drawn across kinds (bugs, features, chains); `turns`:
    model calls a step may take; `interventions`: a scripted step-interventions file; `interactive`: a
    person decides at the end of every step (step_interventions.py)."""
    ch = loading.load(spec.locate(path))
    jobs = source.jobs(ch)
    units = [(i, _steps(ch, i)) for i in (listed(tasks) if tasks else ch.ids())]
    units = stratified(units, (lambda u: _kind(ch, u[1]),), limit)
    dataset = MemoryDataset([Sample(id=uid, input=ch.prompt(ch.task(steps[0])),
                                    metadata={"kind": _kind(ch, steps), "steps": steps,
                                              "prompt_sha256": {s: ch.prompt_sha256(ch.task(s)) for s in steps}})
                             for uid, steps in units], name=ch.label)
    reducers = ["mean"] + [r(k) for k in range(2, epochs + 1) for r in (pass_at, pass_k)]
    policy = step_interventions.load(interventions)
    return Task(dataset=dataset, solver=agent_loop.work(jobs, turns, policy, interactive), scorer=steps_judged(),
                sandbox="k3", epochs=Epochs(epochs, reducers) if epochs > 1 else None,
                metadata={"challenge": ch.label, "version": ch.version, "fingerprint": ch.fingerprint(SCORER_FILES),
                          "canary": ch.canary, "rules": [r.text for r in ch.rules],
                          "prompt_sha256": {t.id: ch.prompt_sha256(t) for t in ch.every_task},
                          "tasks": len(ch.every_task)})


def _steps(ch: spec.Challenge, unit: str) -> list[str]:
    if unit in [c.id for c in ch.chains]:
        return [s.id for s in ch.chain(unit).steps]
    task = ch.task(unit)
    if task.chain is not None:
        raise spec.ChallengeError(f"{unit} is a step of the chain {task.chain}: name the chain to run it")
    return [task.id]


def _kind(ch: spec.Challenge, steps: list[str]) -> str:
    return "chain" if len(steps) > 1 or ch.task(steps[0]).chain else ch.task(steps[0]).kind


@scorer(metrics={"passed": [accuracy(), stderr()], "resolved": [accuracy()], "rules_kept": [accuracy()]})
def steps_judged():
    """The steps' verdicts, taken as each step ended (agent_loop.py), read from the sample's store: passed =
    the share of steps resolved (every required test passes) with their rules kept; a step never reached
    counts as failed. The metadata holds each step's verdict and the sample's records."""
    async def score(state: TaskState, target: Target) -> Score:
        records = state.store.get(agent_loop.STORE_KEY) or {}
        steps = state.metadata["steps"]
        done = {s["id"]: s["verdict"] for s in records.get("steps", []) if s.get("verdict")}
        share = {k: sum(bool(done.get(s, {}).get(k)) for s in steps) / len(steps)
                 for k in ("passed", "resolved", "rules_kept")}
        return Score(value=share, answer="".join(done.get(s, {}).get("diff", "") for s in steps),
                     explanation=_explain(steps, done),
                     metadata={"group": str(state.sample_id), "kind": state.metadata["kind"],
                               "completed": sum(bool(done.get(s, {}).get("passed")) for s in steps),
                               "steps": len(steps), "totals": totals(records),
                               "records": {**records, "steps": [_lean(s) for s in records.get("steps", [])]}})

    return score


def _lean(step: dict) -> dict:
    """A step's record without its diff (the score's answer holds the diffs)."""
    return {**step, "verdict": {k: v for k, v in step.get("verdict", {}).items() if k != "diff"}}


def totals(records: dict) -> dict:
    steps = records.get("steps", [])
    kinds: dict[str, int] = {}
    for i in records.get("interventions", []):
        kinds[i["kind"]] = kinds.get(i["kind"], 0) + 1
    return {"turns": sum(s["turns"] for s in steps), "input_tokens": sum(s["input_tokens"] for s in steps),
            "output_tokens": sum(s["output_tokens"] for s in steps),
            "context_tokens": max((s["context_tokens"] for s in steps), default=0),
            "interventions": len(records.get("interventions", [])), "interventions_by_kind": kinds,
            "hallucinations": len(records.get("hallucinations", [])),
            "agent_s": round(sum(s["seconds"] for s in steps), 3),
            "judge_s": round(sum(s.get("verdict", {}).get("judge_s") or 0 for s in steps), 3),
            "sandbox_start_s": records.get("sandbox_start_s")}


def _explain(steps: list[str], done: dict) -> str:
    parts = []
    for s in steps:
        v = done.get(s)
        if v is None:
            parts.append(f"{s}: never reached")
        elif v["error"]:
            parts.append(f"{s}: {v['error']}")
        else:
            what = "passed" if v["passed"] else f"{v['n_failing']} required tests failing" if v["n_failing"] else "tests pass"
            parts.append(f"{s}: {what}" + "".join(f"; rule broken: {b['rule']} ({b['path']})" for b in v["broken"]))
    return "\n".join(parts)

