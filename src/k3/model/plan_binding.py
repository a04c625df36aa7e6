"""The decode plan's weights, bound to its steps once, and the two ways decode rows use them.

`binding(model)` builds, per decoder layer, the native structs its attention and FFN steps read
(`decode_weights`, layers/decode_weights.py) and, when every step of the plan has what it reads (the
norms and mixes too, the embedding and a bf16 head), the whole plan as one `kernels.DecodePlan`. It is
kept on the model and built again only when the weights' generation moves (a load, `set_int8`, a
streamed bank, a new Parameter, `.to()`): nothing is checked per step but that one number.

Decode rows then run either the whole plan in one native call (`decode_rows`: a batch of N sequences of
one new token each, or of verify windows of one length), or, where some step has no native form (a
streamed expert bank, a layer whose hooks must fire), the plan op by op in Python with each bound
sublayer step one native call (`LayerSteps`). Both call the kernels the modules' forwards reach through the registry, in the same
order, so every path gives the same bits (tests/model/test_decode_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from k3.layers.batch import ForwardBatch
from k3.layers.decode_weights import float_weights, generation, matrix
from k3.model.plan import OUTPUT, Op, Step, model_steps
from k3.ops.attnres import attn_res
from k3.ops.dispatch import decode_kernels
from k3.ops.norm import rms_norm

ROW_WEIGHT_DTYPES = (torch.bfloat16, torch.float32)  # what the native row kernels read
_ALL_ROWS = torch.empty(0, dtype=torch.long)          # decode_plan: the logits of every row


@dataclass(frozen=True)
class LayerSteps:
    """A decoder layer's bound native sublayer steps (None: that sublayer runs its module)."""
    kernels: object
    layer: nn.Module
    attention_weights: object | None
    ffn_weights: object | None

    def attention(self, x: torch.Tensor, batch: ForwardBatch, state) -> torch.Tensor | None:
        """The attention's step in one native call when its state takes it (every sequence decoding one
        token on it, or verify windows of one length), else None."""
        if self.attention_weights is None:
            return None
        attention = self.layer.self_attn
        s = attention.decode_state(self.kernels, batch, state, x)
        if s is None:
            return None
        attention.begin_step(batch, state, s)
        return self.kernels.attention_step(x, self.attention_weights, s)

    def ffn(self, x: torch.Tensor) -> torch.Tensor | None:
        return None if self.ffn_weights is None else self.kernels.ffn_step(x, self.ffn_weights)


@dataclass(frozen=True)
class Binding:
    generation: int
    kernels: object
    hooked: tuple[bool, ...]          # which decoder layers had forward hooks
    layers: list[LayerSteps | None]   # None: a layer with forward hooks (its module runs, so they fire)
    plan: object | None               # kernels.DecodePlan, when every step has a native form


def _hooked(model) -> tuple[bool, ...]:
    """Which decoder layers have forward hooks (the streamed trunk reads a layer's bytes in them; a user
    may capture activations): a few dict reads a step, where a check of every weight was hundreds."""
    return tuple(bool(layer._forward_hooks or layer._forward_pre_hooks) for layer in model.model.layers)


def binding(model, kernels) -> Binding:
    """`model`'s binding for `kernels`, built again only when the weights changed since the last one (or
    a decoder layer gained or lost its hooks)."""
    held = model.__dict__.get("_plan_binding")
    hooked = _hooked(model)
    if held is None or held.generation != generation() or held.kernels is not kernels or held.hooked != hooked:
        held = _bind(model, kernels, hooked)
        model.__dict__["_plan_binding"] = held
    return held


def _bind(model, kernels, hooked: tuple[bool, ...]) -> Binding:
    count = generation()
    layers = [None if hooks else LayerSteps(kernels, layer, layer.self_attn.decode_weights(kernels),
                                            layer.ffn_module.decode_weights(kernels))
              for layer, hooks in zip(model.model.layers, hooked)]
    return Binding(count, kernels, hooked, layers, _whole_plan(model, kernels, layers))


def _whole_plan(model, kernels, layers: list[LayerSteps | None]):
    """kernels.DecodePlan of every step, or None where one has no native form."""
    text, c = model.model, model.config
    embed = float_weights(text, ("embed_tokens",), ROW_WEIGHT_DTYPES)
    head = matrix(kernels, text, "embed_tokens") if c.tie_word_embeddings else matrix(kernels, model, "lm_head")
    if embed is None or head is None or head.scale.numel() or any(s is None for s in layers):
        return None
    steps = []
    for step in model_steps(c):
        owner = text if step.layer == OUTPUT else text.layers[step.layer]
        native = _native_step(kernels, step, owner, layers[step.layer] if step.layer != OUTPUT else None)
        if native is None:
            return None
        steps.append(native)
    return kernels.make_decode_plan(embed=embed[0], steps=steps, head=head)


def _norm(kernels, owner: nn.Module, name: str):
    """The RMSNorm `owner.<name>` for the row kernel, when the registry's rms_norm would take it natively."""
    module = getattr(owner, name)
    w = float_weights(module, ("weight",), ROW_WEIGHT_DTYPES)
    row = torch.zeros(1, w[0].shape[0]) if w is not None else None
    if row is None or not rms_norm.supports(row, w[0], module.eps):
        return None
    return kernels.NormWeights(weight=w[0], eps=module.eps)


def _native_step(kernels, step: Step, owner: nn.Module, layer: LayerSteps | None):
    """`step` as a kernels.PlanStep with the weights its op reads, or None when they have no native form."""
    fields = {}
    if step.op is Op.NORM or step.op is Op.MIX_NORM:
        fields["norm"] = norm = _norm(kernels, owner, step.norm)
        if norm is None:
            return None
    if step.op is Op.MIX_NORM:
        w = float_weights(owner, (step.mix + "_norm", step.mix + "_proj"), ROW_WEIGHT_DTYPES)
        row = torch.zeros(1, fields["norm"].weight.shape[0])
        if w is None or not attn_res.supports([row, row], w[0], w[1], step.eps):
            return None
        fields = {"mix": kernels.MixNormWeights(norm=w[0], proj=w[1], eps=step.eps, then=fields["norm"])}
    if step.op is Op.ATTENTION:
        fields["attention"] = layer.attention_weights
    if step.op is Op.FFN:
        fields["ffn"] = layer.ffn_weights
    if any(v is None for v in fields.values()):
        return None
    return kernels.PlanStep(op=int(step.op), layer=step.layer, **fields)


def layer_steps(model, x: torch.Tensor) -> list[LayerSteps | None] | None:
    """The layers' bound native sublayer steps where rows x may take them (decode rows, fp32, outside
    autograd, kernels built), else None (every step runs its module)."""
    kernels = decode_kernels(x)
    return None if kernels is None else binding(model, kernels).layers


def decode_rows(model, input_ids: torch.Tensor, batch: ForwardBatch, layer_states: list | None,
                logits_index: torch.Tensor | None) -> torch.Tensor | None:
    """Logits [len(logits_index) or N, vocab] of a batch that is one group the plan steps in one native
    call (batch.one_call_group: N sequences of one new token each, or verify windows of one length, N rows
    in all), the whole plan in one call; None where the plan runs op by op (prefill, ragged windows, no
    state, another dtype, autograd, `reference_only()`, a step without a native form)."""
    N = input_ids.shape[0]
    if (layer_states is None or model.compute_dtype != torch.float32 or N != batch.num_tokens
            or input_ids.dtype != torch.long or not input_ids.is_cpu
            or (logits_index is not None and logits_index.numel() == 0)):   # decode_plan: empty means all rows
        return None
    row = torch.empty((N, model.config.hidden_size))
    kernels = decode_kernels(row) if batch.one_call_group() is not None else None
    bound = binding(model, kernels) if kernels is not None else None
    if bound is None or bound.plan is None:
        return None
    states = []
    for layer, state in zip(model.model.layers, layer_states):
        s = layer.self_attn.decode_state(kernels, batch, state, row)
        if s is None:
            return None
        states.append(s)
    for layer, state, s in zip(model.model.layers, layer_states, states):   # every layer runs: begin them
        layer.self_attn.begin_step(batch, state, s)
    rows = _ALL_ROWS if logits_index is None else logits_index
    return kernels.decode_plan(plan=bound.plan, ids=input_ids.contiguous(), states=states, rows=rows)
