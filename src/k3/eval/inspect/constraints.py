"""`k3/constraints`: does a rule stated at the start still hold after N tokens of conversation? The sweep
runs over prompt lengths in tokens (default: 1k, 2k, 4k, ... up to the model's context), each point
filled with generated exchanges answered within the rule and sized with the model's own tokenizer
(measure.py), `per_length` items a point (rules x final questions) so the intervals can separate.
The report's per-length table and plot come from the score's group (the nominal length)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, get_model
from inspect_ai.scorer import Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import Generate, TaskState, generate, solver

from k3.eval.inspect import filler
from k3.eval.inspect.fingerprint import task_fingerprint
from k3.eval.inspect.measure import Measure
from k3.eval.inspect.sampling import stratified
from k3.eval.inspect.task_args import listed
from k3.eval.tasks.data import builtin

ANSWER_ROOM = 4096          # tokens left for the final answer at the longest point
MAX_TRIES = 6               # sizing rounds (each one count of the whole prompt)


@task
def constraints(lengths: str = "auto", context: int = 32768, per_length: int = 20, limit: int | None = None,
                path: str | None = None) -> Task:
    """`lengths`: comma-separated token counts, or "auto" (doubling from 1024 up to `context` less room for
    the answer); `limit`: that many items drawn across lengths first, then rules."""
    data_path = Path(path) if path else builtin("constraints.json")
    data = json.loads(data_path.read_text(encoding="utf-8"))
    points = sweep(lengths, context)
    rules, finals = data["constraints"], data["final_questions"]
    # Rules rotate with the length too, so a short --limit still sees every rule somewhere on the sweep.
    items = [{"rule": rules[(i + j) % len(rules)], "final": finals[(i // len(rules)) % len(finals)], "tokens": n, "i": i}
             for j, n in enumerate(points) for i in range(per_length)]
    items = stratified(items, (lambda it: it["tokens"], lambda it: it["rule"]["id"]), limit)
    dataset = MemoryDataset([Sample(id=f"{it['rule']['id']}@{it['tokens']}#{it['i']}", input=it["final"],
                                    metadata={"rule": it["rule"], "tokens": it["tokens"], "seed": it["i"]})
                             for it in items], name="constraints")
    fingerprint = task_fingerprint(files=[data_path], modules=(__name__, filler.__name__, "k3.eval.inspect.measure"))
    return Task(dataset=dataset, solver=[fill(), generate()], scorer=rule_kept(),
                metadata={"fingerprint": fingerprint, "lengths": points})


def sweep(lengths: str | int | list, context: int) -> list[int]:
    if lengths != "auto":
        try:
            return sorted({int(x) for x in listed(lengths)})
        except ValueError:
            raise ValueError(f"lengths={lengths!r}: expected token counts such as 1024,4096 or auto") from None
    top, points, n = context - ANSWER_ROOM, [], 1024
    while n <= top:
        points.append(n)
        n *= 2
    if not points:
        raise ValueError(f"a context of {context} tokens leaves no room for a 1024-token point and an answer")
    return points


@solver
def fill():
    """The conversation sized to the sample's token count: the most filler exchanges that keep the prompt
    within it (measured by the model's tokenizer); the length reached goes in the metadata."""
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        meta, measure = state.metadata, Measure(get_model())
        target, rule, final = meta["tokens"], meta["rule"], state.input_text
        base = await measure.tokens(filler.conversation(rule, final, 0, meta["seed"]))
        per = max(1, (await measure.tokens(filler.conversation(rule, final, 8, meta["seed"])) - base) / 8)
        k = max(0, int((target - base) / per))
        for _ in range(MAX_TRIES):      # the most exchanges that stay within the target
            got = await measure.tokens(filler.conversation(rule, final, k, meta["seed"]))
            if got > target and k > 0:
                k = max(0, k - max(1, int((got - target) / per + 0.999)))
            elif target - got >= per:
                k += max(1, int((target - got) / per))
            else:
                break
        meta.update(reached=got, exchanges=k, counted_by=measure.source)
        state.messages = [(ChatMessageUser if m["role"] == "user" else ChatMessageAssistant)(content=m["content"])
                          for m in filler.conversation(rule, final, k, meta["seed"])]
        return state

    return solve


def obeys(check: str, text: str) -> bool:
    text = text.strip()
    if check == "upper":
        return any(c.isalpha() for c in text) and text == text.upper()
    if check.startswith("suffix:"):
        return text.endswith(check.split(":", 1)[1])
    if check == "no_digits":
        return bool(text) and not re.search(r"[0-9]", text)
    if check == "json_answer":
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return isinstance(value, dict) and set(value) == {"answer"}
    if check.startswith("max_words:"):
        return 0 < len(text.split()) < int(check.split(":", 1)[1])
    raise ValueError(f"unknown constraint check {check!r}")


@scorer(metrics=[accuracy(), stderr()])
def rule_kept():
    """1 when the final answer keeps the rule (a truncated answer scores 0; the report shows both views)."""
    async def score(state: TaskState, target: Target) -> Score:
        meta = state.metadata
        cut = state.output.stop_reason == "max_tokens"
        kept = not cut and obeys(meta["rule"]["check"], state.output.completion)
        return Score(value=float(kept), answer=state.output.completion,
                     explanation="truncated" if cut else ("kept" if kept else "broken"),
                     metadata={"group": str(meta["tokens"]), "rule": meta["rule"]["id"], "reached": meta.get("reached"),
                               "counted_by": meta.get("counted_by")})

    return score
