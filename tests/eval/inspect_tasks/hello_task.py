"""An Inspect task for the tests: one generate() on a short prompt (for `--model k3/default`)."""

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def hello_task():
    return Task(dataset=[Sample(input="Say hello.", target="hello")], solver=generate(), scorer=includes())
