"""torch.compile over the whole model: each kernel enters the graph as its torch operator (fake kernels give
the shapes), the native decode plan stands aside (a trace cannot follow its C++ steps), and the compiled
model's logits are the eager model's, bit for bit, for a prompt and for a decode step from its state."""

from __future__ import annotations

import torch

from k3.model.weights import load_model


def test_the_compiled_model_gives_the_eager_logits(tiny_checkpoint):
    model = load_model(tiny_checkpoint)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm.code)
        return gm

    compiled = torch.compile(model, backend=backend)
    prompt, step = torch.tensor([[3, 17, 5, 40, 2, 9, 11]]), torch.tensor([[23]])
    with torch.inference_mode():
        eager_state, compiled_state = model.new_state(1), model.new_state(1)
        assert torch.equal(compiled(prompt, compiled_state), model(prompt, eager_state))
        graphs.clear()
        assert torch.equal(compiled(step, compiled_state), model(step, eager_state))
    traced = "".join(graphs)
    # the decode step, op by op, traced; the routed experts as one operator, not a break at their ids
    for op in ("kda_decode_slots", "mla_paged_decode", "bf16_linear", "mxfp4_moe_tokens"):
        assert f"torch.ops.k3.{op}" in traced, op
