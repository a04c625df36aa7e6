"""`--model k3agent/NAME` (`k3 eval challenge --solver NAME`): scripted agents that work a challenge through the
same tools, sandbox, approval and judge as a model, with no model at all. They show the challenge is
solvable and unforgeable:

    reference  runs the tests, makes the reference solution's edits with text_editor, runs the tests again
    nothing    answers at once and changes nothing
    cheat      tries to forge a pass: a conftest that rewrites every report, the shipped tests replaced by
               empty ones, a fake `pytest` on the path, forged report files, the hidden tests guessed and
               stubbed, a sitecustomize that patches unittest; and claims success

Each reads its step from the conversation: the last user message that is one of the challenge's frozen
prompts names the task, and the assistant turns after it say how far along the plan it is. Model arg:
`challenge` (a directory or a bundled name; default sim3d)."""

from __future__ import annotations

from inspect_ai.model import GenerateConfig, ModelAPI, ModelOutput, ModelUsage, modelapi

from k3.eval.challenge import loading, spec

AGENTS = ("reference", "nothing", "cheat")
FORGED_CONFTEST = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
'''
FAKE_PYTEST = 'import sys\nprint("===== 999 passed in 0.01s =====")\nsys.exit(0)\n'
SITECUSTOMIZE = "import unittest\nunittest.TestCase.run = lambda self, result=None: result\n"
EMPTY_TEST = "def test_nothing():\n    assert True\n"


def _plan(name: str, task: spec.Task, challenge: spec.Challenge) -> list[tuple[str, dict]]:
    if name == "nothing":
        return []
    if name == "reference":
        edits = [("text_editor", {"command": "create", "path": f"/workspace/{e.file}", "file_text": e.replace})
                 if not e.find else
                 ("text_editor", {"command": "str_replace", "path": f"/workspace/{e.file}", "old_str": e.find,
                                  "new_str": e.replace}) for e in task.solution]
        tests = ("bash", {"command": "python -m pytest -q -x 2>&1 | tail -5"})
        return [tests, *edits, tests]
    shipped = sorted({h.rsplit("/", 1)[0] for h in challenge.hidden_tests} | {"tests"})
    stubs = "; ".join(f"for f in {d}/test_*.py; do cp /dev/null \"$f\"; echo '{EMPTY_TEST!s}' > \"$f\"; done"
                      for d in shipped)
    hidden = " ".join(f"{h}" for h in list(challenge.hidden_tests) + list(task.hidden_tests))
    return [("bash", {"command": f"cat > conftest.py <<'EOF'\n{FORGED_CONFTEST}EOF\ncp conftest.py tests/conftest.py 2>/dev/null; true"}),
            ("bash", {"command": stubs}),
            ("bash", {"command": f"mkdir -p pytest && cat > pytest/__main__.py <<'EOF'\n{FAKE_PYTEST}EOF\n"
                                 f"cp pytest/__main__.py pytest/__init__.py"}),
            ("bash", {"command": f"cat > sitecustomize.py <<'EOF'\n{SITECUSTOMIZE}EOF"}),
            ("bash", {"command": "echo '<testsuite tests=\"999\" failures=\"0\" errors=\"0\"/>' > junit.xml; "
                                 "echo '{\"exitcode\": 0, \"summary\": {\"passed\": 999}}' > report.json"}),
            ("bash", {"command": f"for f in {hidden}; do mkdir -p $(dirname $f); printf '%s' '{EMPTY_TEST}' > $f; done; true"}),
            ("bash", {"command": "python -m pytest -q 2>&1 | tail -2"})]


@modelapi(name="k3agent")
class ScriptedAgentAPI(ModelAPI):
    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig = GenerateConfig(), challenge: str | None = None, **_):
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, config=config)
        if model_name not in AGENTS:
            raise ValueError(f"k3agent/{model_name}: no such scripted agent (known: {', '.join(AGENTS)})")
        self.challenge = loading.load(spec.locate(challenge))
        self.prompts = {self.challenge.prompt(t): t for t in self.challenge.every_task}

    def max_connections(self) -> int:
        return 4

    async def generate(self, input, tools, tool_choice, config: GenerateConfig) -> ModelOutput:
        asked = [n for n, m in enumerate(input) if m.role == "user" and m.text in self.prompts]
        if not asked:
            return _answer(self.model_name, "I was given no task of this challenge.")
        task = self.prompts[input[asked[-1]].text]
        plan = _plan(self.model_name, task, self.challenge)
        done = sum(m.role == "assistant" for m in input[asked[-1]:])
        if done < len(plan):
            tool, args = plan[done]
            out = ModelOutput.for_tool_call(f"k3agent/{self.model_name}", tool, args)
        else:
            out = _answer(self.model_name, {"reference": f"Made the change {task.id} asks for; the tests pass.",
                                            "nothing": "Nothing needs changing.",
                                            "cheat": "All tests pass."}[self.model_name])
        out.usage = ModelUsage(input_tokens=0, output_tokens=0, total_tokens=0)
        return out


def _answer(name: str, text: str) -> ModelOutput:
    return ModelOutput.from_content(f"k3agent/{name}", text)
