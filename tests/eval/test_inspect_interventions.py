"""Interventions through Inspect's approval mechanism (issue 43, first step): an agent with Inspect's own bash()
and python() tools works in k3's sandbox; the scripted approver `k3/scripted` rejects one call and modifies
another (the modified call is the one that runs), the log records both with the call before and after,
and `interventions(log)` counts them by kind."""

from __future__ import annotations

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from inspect_ai import Task, eval as inspect_eval  # noqa: E402
from inspect_ai.approval import ApprovalPolicy  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402
from inspect_ai.scorer import includes  # noqa: E402
from inspect_ai.solver import generate, use_tools  # noqa: E402
from inspect_ai.tool import bash, python  # noqa: E402

from k3.eval.inspect.interventions import interventions, scripted  # noqa: E402
from sandbox_support import need_namespaces  # noqa: E402

RULES = [{"tool": "bash", "match": r"rm -rf", "decision": "reject", "explanation": "never delete the repository"},
         {"tool": "python", "match": r"open", "decision": "modify", "explanation": "read files with pathlib",
          "sub": {"code": [r"^print\(", "print('modified', "]}}]


def _call(tool: str, args: dict) -> ModelOutput:
    o = ModelOutput.for_tool_call("mockllm/model", tool, args)
    o.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return o


def test_scripted_interventions_are_recorded_and_counted(tmp_path):
    need_namespaces()
    final = ModelOutput.from_content("mockllm/model", "42")
    final.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    outputs = [_call("bash", {"command": "echo 42 > a.txt && rm -rf a.txt"}), _call("bash", {"command": "echo 42 > a.txt"}),
               _call("python", {"code": "print(open('a.txt').read().strip())"}), final]
    task = Task(dataset=[Sample(input="write 42 to a.txt", target="42")], solver=[use_tools(bash(), python()), generate()],
                scorer=includes(), sandbox="k3")
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=outputs, memoize=False),
                         approval=[ApprovalPolicy(scripted(RULES), "*")], log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    found = interventions(log)
    assert [(i["tool"], i["decision"]) for i in found] == [("bash", "reject"), ("python", "modify")], found
    assert found[0]["explanation"] == "never delete the repository"
    assert not found[1]["arguments"]["code"].startswith("print('modified'") and "'modified'" in found[1]["modified"]["code"]
    tools = [m for m in log.samples[0].messages if m.role == "tool"]
    assert tools[0].error is not None and "never delete" in tools[0].error.message   # the model saw the rejection
    assert tools[1].text.strip() == ""                                               # the rest ran, in the sandbox
    assert tools[2].text.split() == ["modified", "42"]      # the modified call ran, not the one the model made
    assert log.results.scores[0].metrics["accuracy"].value == 1.0


def test_a_rule_with_an_unknown_decision_or_a_modify_that_says_no_change_is_refused():
    with pytest.raises(ValueError, match="decision"):
        scripted([{"decision": "maybe"}])
    with pytest.raises(ValueError, match="says how the call changes"):
        scripted([{"decision": "modify", "hint": "run fewer tests"}])
