"""The sim3d challenge end to end (issue 66): the three scripted agents through `k3 eval challenge --solver`
(reference 100 %, do-nothing 0 %, cheat 0 %), a model at an OpenAI-compatible endpoint making tool calls,
a chain with scripted step interventions (hint, restart) and tool-call interventions, hallucination
events, records per step, and the leaderboard built from the logs."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402

from k3.cli.main import main  # noqa: E402
from k3.eval.challenge import loading, spec
from k3.eval.inspect.agent_records import hallucinations  # noqa: E402
from k3.eval.inspect.challenge import challenge  # noqa: E402
from sandbox_support import need_namespaces  # noqa: E402
from scripted_server import scripted_endpoint  # noqa: E402

SIM3D = loading.load(spec.BUNDLED)


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _samples(summary: dict):
    [task] = summary["tasks"]
    return read_eval_log(task["log"]).samples


@pytest.mark.parametrize("solver,score", [("reference", 1.0), ("nothing", 0.0), ("cheat", 0.0)])
def test_scripted_agents_solve_all_none_and_none(tmp_path, capsys, solver, score):
    need_namespaces()
    assert main(["eval", "challenge", "--solver", solver, "--log-dir", str(tmp_path), "--no-progress"]) == 0
    summary = _last_json(capsys)
    samples = _samples(summary)
    assert len(samples) == len(SIM3D.tasks) + len(SIM3D.chains)
    passed = {s.id: s.scores["steps_judged"].value["passed"] for s in samples}
    assert all(v == score for v in passed.values()), passed
    assert summary["tasks"][0]["score"] == score
    if solver == "cheat":                                  # its forgeries are on record as broken rules
        broken = [b for s in samples for step in s.scores["steps_judged"].metadata["records"]["steps"]
                  for b in step["verdict"]["broken"]]
        assert any("tests sim3d came with" in b["rule"] for b in broken)
    totals = samples[0].scores["steps_judged"].metadata["totals"]
    assert totals["sandbox_start_s"] > 0 and totals["judge_s"] > 0 and totals["turns"] >= 1


def test_list_and_limit(tmp_path, capsys):
    assert main(["eval", "challenge", "--list"]) == 0
    listed = _last_json(capsys)
    assert listed["challenge"] == "sim3d-1" and len(listed["tasks"]) == len(SIM3D.every_task)
    assert all(len(t["prompt_sha256"]) == 64 for t in listed["tasks"])
    need_namespaces()
    assert main(["eval", "challenge", "--solver", "reference", "--limit", "3", "--log-dir", str(tmp_path),
                 "--no-progress"]) == 0
    summary = _last_json(capsys)
    samples = _samples(summary)
    assert len(samples) == 3 and len({s.metadata["kind"] for s in samples}) == 3   # a bug, a feature, the chain
    report = open(summary["report"]).read()                 # the records, per task, in k3's report
    assert "sim3d-1: 7 of 25 tasks completed (7 run)" in report and "| rope | 1 | 5 / 5 |" in report
    log = read_eval_log(str(next(tmp_path.glob("*.eval"))))
    assert log.eval.metadata["fingerprint"] == listed["fingerprint"]
    assert log.eval.metadata["prompt_sha256"] == {t["id"]: t["prompt_sha256"] for t in listed["tasks"]}


def _tool(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"id": f"call{abs(hash(json.dumps(args))) % 10**8}", "type": "function",
                                           "function": {"name": name, "arguments": json.dumps(args)}}]}


def test_a_model_at_an_endpoint_fixes_a_bug_through_tool_calls(tmp_path, capsys):
    need_namespaces()
    [edit] = SIM3D.task("quat-half-angle").solution

    def reply(messages):
        turns = sum(m["role"] == "assistant" for m in messages)
        plan = [_tool("bash", command="python -c 'import sim3d.missing'"),
                _tool("text_editor", command="str_replace", path=f"/workspace/{edit.file}", old_str=edit.find,
                      new_str=edit.replace)]
        return plan[turns] if turns < len(plan) else "Fixed the half angle."

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"scripted": {"input": 1000.0, "output": 2000.0}}))
    with scripted_endpoint(reply) as url:
        assert main(["eval", "challenge", "--endpoint", url, "-T", "tasks=quat-half-angle", "--prices", str(prices),
                     "--log-dir", str(tmp_path / "run"), "--no-progress"]) == 0
    [sample] = _samples(_last_json(capsys))
    score = sample.scores["steps_judged"]
    assert score.value["passed"] == 1.0, score.explanation
    [event] = score.metadata["records"]["hallucinations"]
    assert event["kind"] == "missing module" and event["detail"] == "sim3d.missing" and event["turn"] == 1
    assert main(["eval", "--leaderboard", str(tmp_path / "run"), "--prices", str(prices)]) == 0
    [row] = next(iter(_last_json(capsys)["leaderboard"].values()))
    assert row["completed"] == 1 and row["cost_usd"] == pytest.approx((3 * 5 * 1000 + 3 * 7 * 2000) / 1e6)


def _agent(plan_for):
    """A mock model: plan_for(messages) -> the next tool call (name, args) or None to answer."""
    def generate(messages, tools, tool_choice, config):
        step = plan_for(messages)
        out = ModelOutput.for_tool_call("mockllm/model", step[0], step[1]) if step else \
            ModelOutput.from_content("mockllm/model", "done")
        out.usage = ModelUsage(input_tokens=10 * len(messages), output_tokens=3, total_tokens=10 * len(messages) + 3)
        return out

    return get_model("mockllm/model", custom_outputs=generate, memoize=False)


def test_a_chain_keeps_state_and_records_step_interventions(tmp_path):
    need_namespaces()
    steps = SIM3D.chain("rope").steps
    prompts = {SIM3D.prompt(s): s for s in steps}

    def plan_for(messages):
        asked = [n for n, m in enumerate(messages) if m.role == "user" and m.text in prompts]
        step = prompts[messages[asked[-1]].text]
        after = messages[asked[-1]:]
        if step.step == 1 and not any(m.role == "user" and "again" in m.text for m in after):
            return ("bash", {"command": "touch stray.txt"}) if sum(m.role == "assistant" for m in after) == 0 else None
        edits = [("text_editor", {"command": "create", "path": f"/workspace/{e.file}", "file_text": e.replace})
                 if not e.find else ("text_editor", {"command": "str_replace", "path": f"/workspace/{e.file}",
                                                     "old_str": e.find, "new_str": e.replace}) for e in step.solution]
        done = sum(m.role == "assistant" for m in after if m.role == "assistant") - (1 if step.step == 1 else 0)
        since = [m for m in after if m.role == "user" and "again" in m.text]
        done = sum(m.role == "assistant" for m in messages[messages.index(since[-1]):]) if since else done
        return edits[done] if done < len(edits) else None

    policy = tmp_path / "interventions.json"
    policy.write_text(json.dumps({"rules": [
        {"step": "rope-1-build", "if": "always", "kind": "hint", "text": "Did you add the module? Check with pytest."},
        {"step": "rope-1-build", "if": "always", "kind": "restart", "text": "Start this step again, please."},
        {"step": "rope-3-error", "if": "tests_fail", "kind": "hint", "text": "never shown: the tests pass"}]}))
    [log] = inspect_eval(challenge(tasks="rope", interventions=str(policy)), model=_agent(plan_for),
                         log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    score = log.samples[0].scores["steps_judged"]
    assert score.value["passed"] == 1.0, score.explanation
    records = score.metadata["records"]
    kinds = [(i["step"], i["kind"], i["who"]) for i in records["interventions"]]
    assert kinds == [("rope-1-build", "hint", "script"), ("rope-1-build", "restart", "script")]
    assert all(i["context_tokens"] > 0 for i in records["interventions"])
    first = records["steps"][0]
    assert "stray.txt" not in first["verdict"]["changed"]          # the restart put the workspace back
    assert [s["id"] for s in records["steps"]] == [s.id for s in steps]
    contexts = [s["context_tokens"] for s in records["steps"]]
    assert contexts == sorted(contexts) and contexts[-1] > contexts[0]     # one conversation: the context grows


def test_tool_call_interventions_are_recorded_with_their_step(tmp_path):
    need_namespaces()
    policy = tmp_path / "approval.yaml"
    policy.write_text("approvers:\n  - name: k3/scripted\n    tools: '*'\n    rules:\n"
                      "      - {tool: bash, match: 'rm -rf', decision: reject, explanation: never delete the repository}\n")
    [edit] = SIM3D.task("seeded-scene").solution
    plan = [("bash", {"command": "rm -rf sim3d"}),
            ("text_editor", {"command": "str_replace", "path": f"/workspace/{edit.file}", "old_str": edit.find,
                             "new_str": edit.replace})]
    model = _agent(lambda messages: plan[sum(m.role == "assistant" for m in messages)]
                   if sum(m.role == "assistant" for m in messages) < len(plan) else None)
    [log] = inspect_eval(challenge(tasks="seeded-scene"), model=model, approval=str(policy), log_dir=str(tmp_path),
                         display="none")
    score = log.samples[0].scores["steps_judged"]
    assert score.value["passed"] == 1.0, score.explanation
    [record] = score.metadata["records"]["interventions"]
    assert (record["step"], record["kind"], record["who"], record["turn"]) == ("seeded-scene", "reject", "script", 1)
    assert record["text"] == "never delete the repository" and record["arguments"] == {"command": "rm -rf sim3d"}


def test_hallucination_events_are_read_from_tool_output():
    found = hallucinations("Traceback...\nModuleNotFoundError: No module named 'sim3d.physics'\n"
                           "AttributeError: module 'numpy' has no attribute 'vec3'\n"
                           "NameError: name 'integrate_rk4' is not defined\n  File x\nSyntaxError: invalid syntax\n"
                           "ImportError: cannot import name 'Rope' from 'sim3d' (/workspace/sim3d/__init__.py)")
    assert [(f["kind"], f["detail"]) for f in found] == [
        ("missing module", "sim3d.physics"), ("missing name", "Rope"), ("missing attribute", "numpy.vec3"),
        ("undefined name", "integrate_rk4"), ("cannot run", "SyntaxError.invalid syntax")]
    assert hallucinations("3 passed in 0.1s") == []
