"""What Inspect AI loads through k3's entry point: the sandbox environment "k3", the model provider "k3",
k3's tasks (`k3/bfcl`, `k3/challenge`, `k3/code`, `k3/constraints`, `k3/grading`, `k3/harmful`,
`k3/humaneval`, `k3/refusal`), the scripted agents `k3agent/NAME`, the tool `k3/text_editor` and the approver `k3/scripted`."""

from k3.eval.check import measured  # noqa: F401  (the timed endpoint provider "k3check")
from k3.eval.inspect import (bfcl, challenge, constraints, editor, grading, harmful, interventions,  # noqa: F401
                            model_api, refusal, sandbox_env, scripted_agents, tasks)  # (registered on import)
