"""The challenge under bad input (issue 66): an agent that fills the disk or forks without end gets errors
from its tools and a verdict of failed, never a wrong one; a run stopped halfway (its endpoint died)
resumes with `k3 eval --retry`, keeping the samples it finished; a person's interactive decision is
recorded as a person's."""

from __future__ import annotations

import contextlib
import io
import json
import threading

import pytest

pytest.importorskip("inspect_ai", reason="Inspect AI comes with the [eval] extra")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.hooks import Hooks, SampleEnd, hooks  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402
from rich.console import Console  # noqa: E402

from k3.cli.main import main  # noqa: E402
from k3.eval.challenge import loading, spec
from k3.eval.inspect import step_interventions  # noqa: E402
from k3.eval.inspect.challenge import challenge  # noqa: E402
from sandbox_support import need_namespaces  # noqa: E402
from scripted_server import scripted_endpoint  # noqa: E402

SIM3D = loading.load(spec.BUNDLED)
QUAT_ENDED = threading.Event()


@hooks(name="k3-tests-quat-ended", description="tells the halfway test that quat-half-angle was scored and logged")
class _QuatEnded(Hooks):
    async def on_sample_end(self, data: SampleEnd) -> None:
        if data.sample.id == "quat-half-angle":
            QUAT_ENDED.set()


def _agent(calls):
    def generate(messages, tools, tool_choice, config):
        done = sum(m.role == "assistant" for m in messages)
        out = ModelOutput.for_tool_call("mockllm/model", "bash", {"command": calls[done]}) if done < len(calls) else \
            ModelOutput.from_content("mockllm/model", "done")
        out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)   # (else Inspect counts with tiktoken)
        return out

    return get_model("mockllm/model", custom_outputs=generate, memoize=False)


@pytest.mark.parametrize("calls", [
    ["head -c 300000000 /dev/zero > big.bin; ls -la big.bin"],                       # past the workspace's size
    # a fork bomb (each process stops forking after 3 s, so the test does not wait for the sandbox's wall limit)
    ["python -c \"import os, time\nend = time.time() + 3\nwhile time.time() < end:\n    try:\n        os.fork()\n"
     "    except OSError:\n        pass\" ; echo survived"],
    ["yes > flood.txt"],                                                                # fills the disk, then stops
], ids=["fills-the-disk", "forks-without-end", "yes-to-a-file"])
def test_an_agent_that_attacks_its_sandbox_gets_a_failed_verdict(tmp_path, calls):
    need_namespaces()
    [log] = inspect_eval(challenge(tasks="quat-half-angle"), model=_agent(calls), log_dir=str(tmp_path),
                         display="none")
    assert log.status == "success", log.error
    score = log.samples[0].scores["steps_judged"]
    assert score.value["passed"] == 0.0 and score.value["resolved"] == 0.0, score.explanation
    [step] = score.metadata["records"]["steps"]
    assert step["verdict"]["n_failing"] >= 1 or step["verdict"]["error"]


def test_a_run_stopped_halfway_resumes_keeping_what_it_finished(tmp_path, capsys):
    need_namespaces()
    fixes = {SIM3D.prompt(SIM3D.task(t)): SIM3D.task(t).solution[0] for t in ("quat-half-angle", "seeded-scene")}
    down, asked = [True], []
    QUAT_ENDED.clear()

    def reply(messages):
        edit = fixes[messages[0]["content"] if isinstance(messages[0]["content"], str) else messages[0]["content"][0]["text"]]
        asked.append(edit.file)
        if edit.file == "sim3d/scene.py" and down[0]:
            # the endpoint dies only once the other sample is scored: an error cancels the samples still running
            assert QUAT_ENDED.wait(timeout=600), "quat-half-angle never ended"
            raise ConnectionError("the server went away")
        if sum(m["role"] == "assistant" for m in messages):
            return "Fixed."
        args = {"command": "str_replace", "path": f"/workspace/{edit.file}", "old_str": edit.find, "new_str": edit.replace}
        return {"content": "", "tool_calls": [{"id": "c1", "type": "function",
                                               "function": {"name": "text_editor", "arguments": json.dumps(args)}}]}

    with scripted_endpoint(reply) as url:
        argv = ["eval", "challenge", "--endpoint", url, "-T", "tasks=quat-half-angle,seeded-scene", "--max-retries", "0",
                "--log-dir", str(tmp_path / "first"), "--no-progress"]
        assert main(argv) == 1
        stopped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        [task] = stopped["tasks"]
        assert task["status"] == "error" and "k3 eval --retry" in stopped["problems"][0]
        finished = [s.id for s in read_eval_log(task["log"]).samples or [] if s.scores]
        assert finished == ["quat-half-angle"]
        before = asked.count("sim3d/quat.py")
        down[0] = False
        assert main(["eval", "--retry", task["log"], "--log-dir", str(tmp_path / "again"), "--no-progress"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    samples = read_eval_log(resumed["tasks"][0]["log"]).samples
    assert {s.id: s.scores["steps_judged"].value["passed"] for s in samples} == {"quat-half-angle": 1.0, "seeded-scene": 1.0}
    assert asked.count("sim3d/quat.py") == before                 # the finished sample was kept, not run again


def test_a_person_at_the_end_of_a_step_is_recorded_as_a_person(monkeypatch):
    answers = iter(["hint", "look at the seed argument"])
    screen = io.StringIO()

    @contextlib.contextmanager
    def fake_screen(header=None, **_):
        yield Console(file=screen)

    monkeypatch.setattr("inspect_ai.util.input_screen", fake_screen)
    monkeypatch.setattr("rich.prompt.Prompt.ask", lambda *a, **k: next(answers))
    policy = step_interventions.StepPolicy([], interactive=True)

    async def never():
        raise AssertionError("a person's decision runs no tests")

    import asyncio
    decided = asyncio.run(policy.decide("seeded-scene", never, "I changed the seed.", ["sim3d/scene.py"]))
    assert decided == ("hint", "person", "look at the seed argument")
    assert "I changed the seed." in screen.getvalue() and "sim3d/scene.py" in screen.getvalue()


def test_a_malformed_interventions_file_is_named(tmp_path):
    bad = tmp_path / "i.json"
    bad.write_text(json.dumps({"rules": [{"kind": "shout"}]}))
    with pytest.raises(ValueError, match=r"i.json: rules\[0\]: needs \"kind\""):
        step_interventions.load(str(bad))
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="interventions file"):
        step_interventions.load(str(bad))
