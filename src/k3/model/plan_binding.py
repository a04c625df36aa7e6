"""The whole decode plan in one native call: its steps' weights bound once, and the decode rows that run it.

`binding(model, kernels)` builds, when every step of the plan has a native form (each layer's attention
and FFN `step_weights` (layers/steps.py), the norms and mixes, the embedding and a bf16 head), the whole
plan as one `kernels.DecodePlan`, and keeps it on the model (`model.decode_binding`) until
`model.weights_changed()`.

`decode_in_one_call` then runs a batch that is one group the plan steps in one call (N sequences of one new
token each, or verify windows of one length) as one native call, on the step states the state's owner built
(layers/step_state.py). Everything else runs the plan op by op (model/plan.py's `run_steps`), where each
sublayer's forward runs its registered native step for rows it takes (layers/steps.py). Both routes call the
same kernels in the same order, so they give the same bits (tests/model/test_decode_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from k3.layers.batch import ForwardBatch
from k3.layers.decode_weights import float_weights, matrix
from k3.layers.steps import step_weights
from k3.model.plan import OUTPUT, Op, Step, model_steps
from k3.ops.attnres import attn_res_takes
from k3.ops.dispatch import decode_kernels
from k3.ops.norm import rms_norm_takes

ROW_WEIGHT_DTYPES = (torch.bfloat16, torch.float32)  # what the native row kernels read
_ALL_ROWS = torch.empty(0, dtype=torch.long)          # decode_plan: the logits of every row


@dataclass(frozen=True)
class Binding:
    kernels: object
    plan: object | None   # kernels.DecodePlan, when every step has a native form


def binding(model, kernels) -> Binding:
    """`model`'s binding for `kernels`, built on first use and kept until `model.weights_changed()`."""
    held = model.decode_binding
    if held is None or held.kernels is not kernels:
        held = model.decode_binding = Binding(kernels, _whole_plan(model, kernels))
    return held


def _whole_plan(model, kernels):
    """kernels.DecodePlan of every step, or None where one has no native form (or a layer's bytes are
    streamed: they are read around its module's forward)."""
    text, c = model.model, model.config
    embed = float_weights(text, ("embed_tokens",), ROW_WEIGHT_DTYPES)
    head = matrix(kernels, text, "embed_tokens") if c.tie_word_embeddings else matrix(kernels, model, "lm_head")
    if embed is None or head is None or head.scale.numel() or any(layer.store is not None for layer in text.layers):
        return None
    steps = []
    for step in model_steps(c):
        owner = text if step.layer == OUTPUT else text.layers[step.layer]
        plan_step = _plan_step(kernels, step, owner)
        if plan_step is None:
            return None
        steps.append(plan_step)
    return kernels.make_decode_plan(embed=embed[0], steps=steps, head=head)


def _norm(kernels, owner: nn.Module, name: str):
    """The RMSNorm `owner.<name>` for the row kernel, when the registry's rms_norm would take it natively."""
    module = getattr(owner, name)
    w = float_weights(module, ("weight",), ROW_WEIGHT_DTYPES)
    if w is None or not rms_norm_takes(w[0]):
        return None
    return kernels.NormWeights(weight=w[0], eps=module.eps)


def _plan_step(kernels, step: Step, owner: nn.Module):
    """`step` as a kernels.PlanStep with the weights its op reads, or None when they have no native form."""
    fields = {}
    if step.op is Op.NORM or step.op is Op.MIX_NORM:
        fields["norm"] = norm = _norm(kernels, owner, step.norm)
        if norm is None:
            return None
    if step.op is Op.MIX_NORM:
        w = float_weights(owner, (step.mix + "_norm", step.mix + "_proj"), ROW_WEIGHT_DTYPES)
        if w is None or not attn_res_takes(w[0], w[1], fields["norm"].weight.shape[0]):
            return None
        fields = {"mix": kernels.MixNormWeights(norm=w[0], proj=w[1], eps=step.eps, then=fields["norm"])}
    if step.op is Op.ATTENTION:
        fields["attention"] = step_weights(owner.self_attn, kernels)
    if step.op is Op.FFN:
        fields["ffn"] = step_weights(owner.ffn_module, kernels)
    if any(v is None for v in fields.values()):
        return None
    return kernels.PlanStep(op=int(step.op), layer=step.layer, **fields)


def decode_in_one_call(model, input_ids: torch.Tensor, batch: ForwardBatch, step_states: list | None,
                       logits_index: torch.Tensor | None) -> torch.Tensor | None:
    """Logits [len(logits_index) or N, vocab] of a batch that is one group the plan steps in one native
    call (batch.one_call_group: N sequences of one new token each, or verify windows of one length, N rows
    in all), the whole plan in one call on each attention layer's step state (`step_states[i]`: the group's
    KdaStep or MlaStep, from the state's owner); None where the plan runs op by op (prefill, ragged
    windows, no state, another dtype, autograd, `reference_only()`, `model.one_call_decode` off, a step
    without a native form)."""
    N = input_ids.shape[0]
    if (not step_states or model.compute_dtype != torch.float32 or N != batch.num_tokens
            or not model.one_call_decode or input_ids.dtype != torch.long or not input_ids.is_cpu
            or (logits_index is not None and logits_index.numel() == 0)):   # decode_plan: empty means all rows
        return None
    row = torch.empty((N, model.config.hidden_size))
    kernels = decode_kernels(row) if batch.one_call_group() is not None else None
    bound = binding(model, kernels) if kernels is not None else None
    if bound is None or bound.plan is None or not all(len(s) == 1 and s[0].kernel_takes() for s in step_states):
        return None
    states = [s[0].kernel_state(kernels) for s in step_states]
    rows = _ALL_ROWS if logits_index is None else logits_index
    return kernels.decode_plan(plan=bound.plan, ids=input_ids.contiguous(), states=states, rows=rows)
