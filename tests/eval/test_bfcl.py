"""BFCL multi-turn (issue 43) through Inspect: a scripted model that makes the ground truth's calls, turn by
turn, scores 100 % by BFCL's own checker on the subset run here; one that answers without calling
anything scores 0; a call to a function the entry does not have never reaches the back-ends."""

from __future__ import annotations

import ast
import json

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402

from k3.eval.inspect.bfcl import bfcl, call_string, tools_of  # noqa: E402

N = 6


def _usage(o: ModelOutput) -> ModelOutput:
    o.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return o


def _as_tool_call(text: str, tools) -> tuple[str, dict]:
    """"sort('a.pdf')" -> ("sort", {"file_name": "a.pdf"}): positional arguments named by the function's doc."""
    call = ast.parse(text, mode="eval").body
    params = list(next(t for t in tools if t.name == call.func.id).parameters.properties)
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(call.args)}
    return call.func.id, args | {k.arg: ast.literal_eval(k.value) for k in call.keywords}


def _replays_the_ground_truth(entries: dict):
    def generate(messages, tools, tool_choice, config):
        first = next(m.text for m in messages if m.role == "user")
        entry, truth = next(v for v in entries.values() if v[0]["question"][0][-1]["content"] == first)
        turn = sum(m.role == "user" for m in messages) - 1
        since = 0
        for m in reversed(messages):
            if m.role == "user":
                break
            since += m.role == "tool"
        if since < len(truth[turn]):
            name, args = _as_tool_call(truth[turn][since], tools_of(entry))
            return _usage(ModelOutput.for_tool_call("mockllm/model", name, args))
        return _usage(ModelOutput.from_content("mockllm/model", "Done."))

    return generate


def test_replaying_the_ground_truth_scores_everything_and_silence_nothing(tmp_path):
    task = bfcl(limit=N)
    entries = {s.id: (s.metadata["entry"], json.loads(s.target)) for s in task.dataset}
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=_replays_the_ground_truth(entries),
                                               memoize=False), log_dir=str(tmp_path / "perfect"), display="none")
    assert log.status == "success", log.error
    assert len(log.samples) == N
    assert log.results.scores[0].metrics["accuracy"].value == 1.0, \
        [(s.id, s.scores["bfcl_checker"].explanation) for s in log.samples]
    assert len({s.scores["bfcl_checker"].metadata["group"] for s in log.samples}) > 1   # drawn across back-ends
    silent = get_model("mockllm/model", custom_outputs=lambda *a: _usage(ModelOutput.from_content("mockllm/model", "No.")),
                       memoize=False)
    [log] = inspect_eval(bfcl(limit=2), model=silent, log_dir=str(tmp_path / "silent"), display="none")
    assert log.results.scores[0].metrics["accuracy"].value == 0.0


def test_a_call_string_holds_only_an_allowed_name_and_literals():
    assert call_string("cd", {"folder": "a'b"}, {"cd"}) == "cd(folder=\"a'b\")"
    for name, args in (("__import__", {}), ("cd", {"x)": 1}), ("rm", {})):
        with pytest.raises(ValueError):
            call_string(name, args, {"cd"})
