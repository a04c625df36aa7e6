"""An Inspect task for the tests: its solver works in the sample's sandbox (a shell, the interpreter, pytest,
file I/O), its scorer reads what the solver left. Run with `--sandbox k3` (Inspect's own CLI) or eval()."""

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox

TEST = "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"


@solver
def work_in_the_sandbox():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        box = sandbox()
        await box.write_file("calc.py", "def add(a, b):\n    return a + b\n")
        await box.write_file("tests/test_calc.py", TEST)
        shell = await box.exec(["bash", "-c", "echo $((6 * 7)) > answer.txt && ls tests"])
        tests = await box.exec(["python", "-m", "pytest", "-q", "tests"], timeout=120)
        state.metadata.update(shell=shell.stdout, tests_ok=tests.success, tests=tests.stdout[-500:])
        return state

    return solve


@scorer(metrics=[accuracy()])
def left_behind():
    async def score(state: TaskState, target: Target) -> Score:
        answer = (await sandbox().read_file("answer.txt")).strip()
        ok = answer == target.text and state.metadata.get("tests_ok") is True
        return Score(value=CORRECT if ok else INCORRECT, answer=answer, explanation=str(state.metadata))

    return score


@task
def shell_task():
    return Task(dataset=[Sample(input="compute", target="42")], solver=work_in_the_sandbox(), scorer=left_behind())
