"""What Inspect AI loads through k3's entry point: the sandbox environment "k3" and the model provider "k3"."""

from k3.eval.inspect import model_api, sandbox_env  # noqa: F401  (registered on import)
