"""The agent at work on one challenge sample: a task (one step), or a chain (its steps in order, in one
conversation and one workspace, each step starting from what the agent left).

A step: the agent is asked (the sample's prompt, or the step's as a new message), then takes turns (one
model call, then its tool calls run, each through Inspect's approval) until it answers without a tool
call or has used the step's turns. Then the step policy may step in (step_interventions.py: a hint, or
a restart); otherwise the step is judged at once, apart (challenge/verdict.py: a fresh sandbox, tests the
agent never sees), from the workspace as it is and the one the step began with, so each step's rules
are checked on what that step changed. Everything is recorded (agent_records.py) in the sample's store
after every turn: a run cut short keeps what it did."""

from __future__ import annotations

import asyncio
import time

from inspect_ai.log import transcript
from inspect_ai.model import ChatMessageUser, GenerateConfig, execute_tools, get_model
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.tool import bash, python
from inspect_ai.util import sandbox

from k3.eval.challenge import verdict
from k3.eval.challenge.source import Job
from k3.eval.inspect.agent_records import Records, Step, approval_kind, who
from k3.eval.inspect.editor import text_editor
from k3.eval.inspect.sandbox_env import K3SandboxEnvironment
from k3.eval.inspect.step_interventions import StepPolicy
from k3.eval.sandbox.paths import SandboxViolation, printable
from k3.eval.sandbox.teardown import SandboxTeardownError

TOOL_TIMEOUT = 180
STORE_KEY = "k3_challenge"
KEPT_FAILING = 30          # failing test ids kept in a step's record


@solver
def work(jobs: dict[str, Job], turns: int = 40, rules=(), interactive: bool = False):
    """`turns`: model calls a step may take; `rules`/`interactive`: the step policy's."""
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        env = sandbox().as_type(K3SandboxEnvironment)
        steps = [jobs[t] for t in state.metadata["steps"]]
        policy = StepPolicy(list(rules), interactive)
        tools = [bash(TOOL_TIMEOUT), python(TOOL_TIMEOUT), text_editor()]
        before = steps[0].start
        t0 = time.perf_counter()
        await _checkout(env, before)
        records = Records(sandbox_start_s=round((env.start_s or 0.0) + time.perf_counter() - t0, 3))
        for n, job in enumerate(steps):
            if n:
                state.messages.append(ChatMessageUser(content=job.challenge.prompt(job.task)))
            records.steps.append(Step(job.task.id))
            t0 = time.perf_counter()
            try:
                final = await _step(state, env, tools, records, policy, turns, before)
            except (SandboxViolation, SandboxTeardownError) as e:
                # a workspace that cannot be taken whole, or a sandbox whose processes outlived their run,
                # cannot pass; nothing follows
                records.step.verdict = unjudged(f"the workspace could not be judged: {e}")
                state.store.set(STORE_KEY, records.to_dict())
                break
            records.step.seconds = round(time.perf_counter() - t0, 3)
            found = await asyncio.to_thread(verdict.judge, job, final, before)
            records.step.verdict = summary(found, before, final)
            state.store.set(STORE_KEY, records.to_dict())
            before = final
        return state

    return solve


async def _step(state, env, tools, records, policy, turns, before) -> dict[str, bytes]:
    """The agent's turns on one step, with the policy's interventions -> the workspace it leaves."""
    mark = len(state.messages)
    while True:
        await _turns(state, tools, records, turns)
        final = await asyncio.to_thread(env.sandbox.snapshot)

        async def tests_pass() -> bool:
            r = await env.exec(["python", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"], timeout=TOOL_TIMEOUT)
            return r.success

        changed = [printable(p) for p in verdict.changed(before, final)]
        decision = await policy.decide(records.step.id, tests_pass, state.output.completion, changed)
        if decision is None:
            return final
        kind, by, text = decision
        records.intervene(kind, by, text)
        if kind == "restart":
            del state.messages[mark:]
            await _checkout(env, before)
        if text:
            state.messages.append(ChatMessageUser(content=text))
        state.store.set(STORE_KEY, records.to_dict())


def _seeded(epoch: int) -> GenerateConfig:
    """The run's seed moved on by the epoch, so k repeats are k seeds (pass^k over seeds, not k copies of one)."""
    from inspect_ai.model._generate_config import active_generate_config

    seed = active_generate_config().seed
    return GenerateConfig(seed=None if seed is None else seed + epoch - 1)


async def _turns(state, tools, records: Records, limit: int) -> None:
    """Model calls and their tool calls until the agent answers without a tool call, or `limit` turns."""
    model, config = get_model(), _seeded(state.epoch)
    while records.step.turns < limit:
        output = await model.generate(state.messages, tools, config=config)
        state.output = output
        state.messages.append(output.message)
        records.model_call(output, state.messages)
        calls = output.message.tool_calls or []
        if not calls:
            return
        try:
            result = await execute_tools(state.messages, tools)
        finally:
            _approvals(records, {c.id for c in calls})
            state.store.set(STORE_KEY, records.to_dict())
        state.messages.extend(result.messages)
        for m in result.messages:
            if m.role == "tool":
                records.tool_output(m.function or "", m.text, m.error)


def _approvals(records: Records, call_ids: set[str]) -> None:
    """The approval decisions on this turn's tool calls that were interventions (not plain approvals)."""
    for event in list(transcript().events)[-4 * len(call_ids) - 20:]:
        if getattr(event, "event", None) != "approval" or event.call.id not in call_ids:
            continue
        kind = approval_kind(event.decision)
        if kind:
            modified = event.modified.arguments if event.modified is not None else None
            records.intervene(kind, who(event.approver), event.explanation or "", tool=event.call.function,
                              arguments=event.call.arguments, modified=modified)


async def _checkout(env: K3SandboxEnvironment, tree: dict[str, bytes]) -> None:
    """The workspace made exactly `tree` (a restart removes what the agent added)."""
    await env.exec(["bash", "-c", "find . -mindepth 1 -delete"], timeout=60)
    for rel, data in tree.items():
        await env.write_file(rel, data)


def unjudged(why: str) -> dict:
    return {"passed": False, "resolved": False, "rules_kept": True, "broken": [], "failing": [], "n_failing": 0,
            "error": why, "judge_s": 0.0, "changed": [], "diff": ""}


def summary(found: dict, before: dict, final: dict) -> dict:
    """A step's verdict as recorded (the diff and failing ids cut to size)."""
    return {"passed": bool(found["resolved"] and found["rules_kept"]), "resolved": found["resolved"],
            "rules_kept": found["rules_kept"], "broken": found["broken"], "failing": found["failing"][:KEPT_FAILING],
            "n_failing": len(found["failing"]), "error": found["error"], "judge_s": found["judge_s"],
            "changed": [printable(p) for p in verdict.changed(before, final)], "diff": found["diff"]}
