"""A decode step of the whole model as one native call (`token_decode`), for batches of decode rows.

Each decoder layer already decodes in one native call (`layer_decode`), but between those calls the
interpreter prepared each layer's arguments, checked each layer's binding and ran the embedding, the
output mix and norm and the vocabulary projection as separate calls, much of that time the first touch of
Python's and ATen's working set after the weight streams evicted it (benchmarks/decode_profile.py). Here the whole model binds once (`layers/direct.py`: one record of every
object the step reads, one native check a step instead of one a layer), and a step prepares only
what changes with the state (each attention's state tensors and MLA's new cache rows), then makes one
call. `token_decode` runs the kernels the per-layer path runs, in its order, so the logits are the same
bits (tested against it, alone, batched and through the engine).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from k3.layers.batch import ForwardBatch
from k3.layers.direct import Taken, bound, float_weights, matrix
from k3.model.block import ROW_WEIGHT_DTYPES
from k3.ops.attnres import attn_res
from k3.ops.dispatch import MAX_ROWS, direct_kernels
from k3.ops.norm import rms_norm

_NO_ROWS = torch.empty(0, dtype=torch.long)   # token_decode: the logits of every row
_NO_SCALE = torch.empty(0)                     # token_decode: a bf16 head


@dataclass(frozen=True)
class TokenDecodeStep:
    """The model's bound decode step: the embedding table, each decoder layer with its bound step, the
    output mix's and final norm's weights and epsilons, the vocabulary projection (bf16) and a fp32 row
    [1, hidden] that stands in for the hidden states where a layer's step asks for their dtype and device."""
    embed: torch.Tensor
    layers: list
    output: list[torch.Tensor]
    eps: list[float]
    head: torch.Tensor
    like: torch.Tensor


def bind_token_step(model, take: Taken) -> TokenDecodeStep | None:
    """`model` (K3ForCausalLM)'s decode step, when every part of it has a native step: Block AttnRes
    layers bound as layer_decode takes them, output mix and norm the native row kernels read, a bf16 head."""
    text = take(model, "model")
    c = text.config
    if c.attn_res_block_size is None:
        return None
    weights = float_weights(take, text, ("embed_tokens", "output_attn_res_norm", "output_attn_res_proj", "norm"),
                            ROW_WEIGHT_DTYPES)
    if weights is None:
        return None
    embed, *output = weights
    layer_list = take(text, "layers")
    layers = []
    for i in range(len(layer_list)):
        layer = take(layer_list, str(i))
        step = layer._bind_layer(take) if layer.attn_res else None
        if step is None:
            return None
        layers.append((layer, step))
    head = matrix(take, text, "embed_tokens") if c.tie_word_embeddings else matrix(take, model, "lm_head")
    if head is None or head.scale is not None:
        return None
    like = torch.zeros(1, c.hidden_size, dtype=torch.float32)
    eps = [c.rms_norm_eps, text.norm.eps]
    if not (attn_res.use_native([like, like], output[0], output[1], eps[0]) and rms_norm.use_native(like, output[2], eps[1])):
        return None
    return TokenDecodeStep(embed, layers, output, eps, head.weight, like)


def decode_token(model, input_ids: torch.Tensor, batch: ForwardBatch, layer_states: list | None,
                 logits_index: torch.Tensor | None) -> torch.Tensor | None:
    """Logits [len(logits_index) or N, vocab] of a batch whose N sequences each bring one new token, in one
    native call; None where the per-layer forward must run (prefill, verify windows, no state, another
    dtype, autograd, `reference_only()`, weights the native steps do not read as they are)."""
    N = input_ids.shape[0]
    if (layer_states is None or model.compute_dtype != torch.float32 or N > MAX_ROWS or N != batch.num_seqs
            or input_ids.dtype != torch.long or not input_ids.is_cpu
            or (logits_index is not None and logits_index.numel() == 0)):   # token_decode: empty means all rows
        return None
    decode = batch.decode_group()
    if decode is None or not decode.whole:
        return None
    step = bound(model, model._bind_token)
    kernels = direct_kernels(step.like) if step is not None else None
    if kernels is None:
        return None
    layers = []
    for (layer, layer_step), state in zip(step.layers, layer_states):
        args = layer.step_args(layer_step, step.like, batch, state)
        if args is None:
            return None
        layers.append(args)
    rows = _NO_ROWS if logits_index is None else logits_index
    return kernels.token_decode(input_ids.contiguous(), step.embed, layers, step.output, step.eps, step.head,
                                 _NO_SCALE, rows)

