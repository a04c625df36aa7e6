"""What Inspect AI loads through k3's entry point: the sandbox environment "k3", the model provider "k3" and
k3's tasks (`k3/humaneval`, `k3/refusal`)."""

from k3.eval.inspect import model_api, refusal, sandbox_env, tasks  # noqa: F401  (registered on import)
