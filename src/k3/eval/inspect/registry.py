"""What Inspect AI loads through k3's entry point: the sandbox environment "k3", the model provider "k3",
k3's tasks (`k3/challenge`, `k3/humaneval`, `k3/refusal`), the tool `k3/text_editor` and the approver `k3/scripted`."""

from k3.eval.inspect import (challenge, constraints, editor, interventions, model_api, refusal,  # noqa: F401
                            sandbox_env, tasks)  # (registered on import)
