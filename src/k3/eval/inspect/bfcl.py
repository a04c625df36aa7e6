"""`k3/bfcl`: BFCL's multi-turn function calling (Berkeley Function Calling Leaderboard v4; data, function
docs, executable back-ends and checker from the pinned bfcl-eval wheel, sets.py, imported from the wheel
file itself, never installed). Each turn's user message goes to the model with the entry's functions as
tools; its calls run against the back-ends (a file system, a trading bot, ...) and the results go back,
until it answers without a call or reaches `steps` calls in the turn. BFCL's own multi_turn_checker then
compares the state and results the model's calls produce with the ground truth's, turn by turn.

A call reaches the back-end as BFCL's checker expects it, `name(arg=value, ...)`: the name must be one of
the entry's functions and every value is the repr of a JSON value, so the string holds nothing but literals."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageTool, ChatMessageUser, get_model
from inspect_ai.scorer import Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.tool import ToolInfo, ToolParams

from k3.eval import fetch, sets
from k3.eval.inspect.fingerprint import task_fingerprint
from k3.eval.inspect.sampling import stratified

CATEGORIES = ("multi_turn_base", "multi_turn_long_context")
TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def _bfcl():
    """BFCL's modules, imported from the cached wheel (pure Python, and its package has no dependencies we lack)."""
    wheel = str(fetch.path(sets.PINS["bfcl"]))
    if wheel not in sys.path:
        sys.path.append(wheel)
    from bfcl_eval.constants import executable_backend_config as config
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils

    return config, multi_turn_utils, multi_turn_checker


@task
def bfcl(category: str = "multi_turn_base", limit: int | None = None, steps: int = 20) -> Task:
    """`category`: multi_turn_base or multi_turn_long_context; `limit`: entries drawn across the back-ends
    they use; `steps`: calls the model may make in one turn (BFCL's limit is 20)."""
    if category not in CATEGORIES:
        raise ValueError(f"bfcl: category must be one of {', '.join(CATEGORIES)}, not {category!r}")
    entries = sets.bfcl(f"data/BFCL_v4_{category}.json")
    answers = {a["id"]: a["ground_truth"] for a in sets.bfcl(f"data/possible_answer/BFCL_v4_{category}.json")}
    entries = stratified(entries, (lambda e: ",".join(sorted(e["involved_classes"])),), limit)
    dataset = MemoryDataset([Sample(id=e["id"], input=e["question"][0][-1]["content"], target=json.dumps(answers[e["id"]]),
                                    metadata={"entry": e, "category": category}) for e in entries], name=f"bfcl/{category}")
    return Task(dataset=dataset, solver=turns(steps), scorer=bfcl_checker(),
                metadata={"source": sets.PINS["bfcl"].spec, "category": category,
                          "fingerprint": task_fingerprint(texts=[category], modules=(__name__,), pins=(sets.PINS["bfcl"],))})


def tools_of(entry: dict) -> list[ToolInfo]:
    config, _, _ = _bfcl()
    excluded = set(entry.get("excluded_function", ()))
    out = []
    for cls in entry["involved_classes"]:
        doc = Path(config.CLASS_FILE_PATH_MAPPING[cls].rsplit(".", 1)[1]).name
        for fn in sets.bfcl(f"data/multi_turn_func_doc/{doc}.json"):
            if fn["name"] not in excluded:
                out.append(ToolInfo(name=fn["name"], description=fn["description"][:1024],
                                    parameters=ToolParams.model_validate(_schema(fn["parameters"]))))
    return out


def _schema(p):
    """BFCL's parameter types -> JSON Schema's (dict -> object, float -> number, tuple -> array)."""
    if isinstance(p, dict):
        return {k: (TYPES.get(v, v) if k == "type" and isinstance(v, str) else _schema(v)) for k, v in p.items()
                if k != "response"}
    return [_schema(v) for v in p] if isinstance(p, list) else p


def call_string(name: str, args: dict, allowed: set[str]) -> str:
    if name not in allowed or not name.isidentifier():
        raise ValueError(f"{name!r} is not one of this entry's functions")
    if not all(isinstance(k, str) and k.isidentifier() for k in args):
        raise ValueError("argument names must be identifiers")
    return f"{name}({', '.join(f'{k}={json.loads(json.dumps(v))!r}' for k, v in args.items())})"


@solver
def turns(steps: int):
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        _, utils, _ = _bfcl()
        entry, model = state.metadata["entry"], get_model()
        tools = tools_of(entry)
        allowed, run_id = {t.name for t in tools}, f"k3_{uuid.uuid4().hex}"   # BFCL keys back-end state by this
        long_context = "long_context" in state.metadata["category"]
        decoded: list[list[list[str]]] = []
        state.messages = []
        for turn in entry["question"]:
            state.messages += [ChatMessageUser(content=m["content"]) for m in turn]
            decoded.append([])
            for _ in range(steps):
                out = await model.generate(state.messages, tools=tools)
                state.messages.append(out.message)
                state.output = out
                if not out.message.tool_calls:
                    break
                step = []
                for call in out.message.tool_calls:
                    try:
                        step.append(call_string(call.function, call.arguments, allowed))
                        [result], _ = await asyncio.to_thread(utils.execute_multi_turn_func_call, [step[-1]],
                                                              entry["initial_config"], entry["involved_classes"],
                                                              run_id, entry["id"], long_context)
                    except ValueError as e:
                        result = f"Error: {e}"
                    state.messages.append(ChatMessageTool(content=str(result), tool_call_id=call.id, function=call.function))
                decoded[-1].append(step)
        state.metadata["decoded"] = decoded
        return state

    return solve


@scorer(metrics=[accuracy(), stderr()])
def bfcl_checker():
    """BFCL's multi_turn_checker over the calls the model made, turn by turn (state and execution results)."""
    async def score(state: TaskState, target: Target) -> Score:
        _, _, checker = _bfcl()
        entry, decoded = state.metadata["entry"], state.metadata.get("decoded", [])
        truth = json.loads(target.text)
        decoded += [[] for _ in range(len(truth) - len(decoded))]
        found = await asyncio.to_thread(checker.multi_turn_checker, decoded, truth, entry, state.metadata["category"],
                                        f"k3_check_{uuid.uuid4().hex}")
        return Score(value=float(found["valid"]), answer=json.dumps(decoded),
                     explanation=found.get("error_message", "valid"),
                     metadata={"group": ",".join(sorted(entry["involved_classes"])), "error_type": found.get("error_type")})

    return score
