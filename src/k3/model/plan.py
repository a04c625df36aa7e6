"""The model's one description of its layer order: a plan of steps, run op by op here or in one native loop.

Every decoder layer is a short list of steps on three registers (h: the running sum the layer reads and
returns; x: a sublayer's input; y: its output) and the Block AttnRes bank (spec §4.2): normalise (after
an AttnRes mix of bank + [h] where the bank has entries), bank h at a block start, attend, add (or, at a
block start, begin the block's partial sum), mix-and-normalise again, the FFN, add. The final mix and
norm are steps too. `run_steps` runs a list with the modules (prefill, verify windows, any dtype,
autograd; each sublayer's module runs its registered native step for the decode rows it takes);
ops/native/decode_plan.cpp runs the same list for decode rows in one call, each step with the weights
bound to it (model/plan_binding.py). Neither knows the order: it is written here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import torch
from torch import nn

from k3.config.model import K3Config
from k3.layers.batch import ForwardBatch
from k3.ops.attnres import attn_res

OUTPUT = -1   # Step.layer of the final mix and norm, which belong to the text model, not a layer


class Op(IntEnum):
    """What a step does (numbered as decode_plan.cpp's PlanOp)."""
    NORM = 0       # x = norm(h)
    MIX_NORM = 1   # x = norm(attn_res(bank + [h]))
    PUSH = 2       # bank.append(h)
    ATTENTION = 3  # y = attention(x), on the layer's state
    FFN = 4        # y = ffn(x)
    SET = 5        # h = y
    ADD = 6        # h = h + y


@dataclass(frozen=True)
class Step:
    op: Op
    layer: int        # its decoder layer, or OUTPUT
    norm: str = ""    # NORM, MIX_NORM: the RMSNorm module's name on the layer (or the text model)
    mix: str = ""     # MIX_NORM: the AttnRes weights' prefix (<mix>_norm, <mix>_proj)
    eps: float = 0.0  # MIX_NORM: AttnRes's epsilon


def _banked(c: K3Config, layer: int) -> bool:
    """Whether the AttnRes bank holds an entry when `layer` (or the output, at num_hidden_layers) begins."""
    return any(c.is_block_start(j) for j in range(layer))


def _input_norm(c: K3Config, at: int, layer: int, norm: str, mix: str) -> Step:
    """The norm of a sublayer's (or the output's) input at position `at` in the stack: after an AttnRes
    mix where the bank holds entries by then."""
    if c.attn_res_block_size is not None and _banked(c, at):
        return Step(Op.MIX_NORM, layer, norm, mix, c.rms_norm_eps)
    return Step(Op.NORM, layer, norm)


def layer_steps(c: K3Config, i: int) -> tuple[Step, ...]:
    """Decoder layer i. Without AttnRes: pre-norm residuals. With it: the attention reads a mix of the
    bank and the running partial sum; a block start banks its input and begins a new partial sum with
    the attention's output; the FFN reads the mix of the bank and the partial sum."""
    if c.attn_res_block_size is None:
        return (Step(Op.NORM, i, "input_layernorm"), Step(Op.ATTENTION, i), Step(Op.ADD, i),
                Step(Op.NORM, i, "post_attention_layernorm"), Step(Op.FFN, i), Step(Op.ADD, i))
    attention = ((Step(Op.PUSH, i), Step(Op.ATTENTION, i), Step(Op.SET, i)) if c.is_block_start(i)
                 else (Step(Op.ATTENTION, i), Step(Op.ADD, i)))
    return (_input_norm(c, i, i, "input_layernorm", "self_attention_res"), *attention,
            Step(Op.MIX_NORM, i, "post_attention_layernorm", "mlp_res", c.rms_norm_eps), Step(Op.FFN, i), Step(Op.ADD, i))


def output_steps(c: K3Config) -> tuple[Step, ...]:
    """The final AttnRes mix of the bank and the last layer's sum (with AttnRes), then the final norm."""
    return (_input_norm(c, c.num_hidden_layers, OUTPUT, "norm", "output_attn_res"),)


def model_steps(c: K3Config) -> tuple[Step, ...]:
    """The whole plan, layer by layer, then the output's steps."""
    return tuple(s for i in range(c.num_hidden_layers) for s in layer_steps(c, i)) + output_steps(c)


@dataclass
class Registers:
    h: torch.Tensor
    bank: list[torch.Tensor] = field(default_factory=list)
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None


def run_steps(steps: tuple[Step, ...], owner: nn.Module, regs: Registers, batch: ForwardBatch, state=None,
              step_states: tuple = ()) -> None:
    """Run `steps` of one owner (a decoder layer, or the text model for OUTPUT) on `regs`, op by op through
    the modules and the kernel registry (a sublayer's module runs its registered native step for the
    decode rows it takes: layers/steps.py). `state`, `step_states`: the attention layer's (prefill state,
    decode rows' step states: layers/step_state.py)."""
    for step in steps:
        op = step.op
        if op is Op.NORM:
            regs.x = getattr(owner, step.norm)(regs.h)
        elif op is Op.MIX_NORM:
            mixed = attn_res(regs.bank + [regs.h], getattr(owner, step.mix + "_norm").weight,
                             getattr(owner, step.mix + "_proj").weight, step.eps)
            regs.x = getattr(owner, step.norm)(mixed)
        elif op is Op.PUSH:
            regs.bank.append(regs.h)
        elif op is Op.ATTENTION:
            regs.y = owner.self_attn(regs.x, batch, state, step_states)
        elif op is Op.FFN:
            regs.y = owner.ffn_module(regs.x)
        elif op is Op.SET:
            regs.h = regs.y
        else:
            regs.h = regs.h + regs.y


def _step_text(step: Step) -> str:
    """One step as a line of pseudo-code."""
    if step.op is Op.NORM:
        return f"x = {step.norm}(h)"
    if step.op is Op.MIX_NORM:
        return f"x = {step.norm}(attn_res(bank + [h], {step.mix}))"
    if step.op is Op.PUSH:
        return "bank.append(h)            # a block starts"
    if step.op is Op.ATTENTION:
        return "y = attention(x, state)   # kda or mla: the layer's type"
    if step.op is Op.FFN:
        return "y = ffn(x)                # moe or the dense mlp"
    return "h = y" if step.op is Op.SET else "h = h + y"


def _ranges(layers: list[int]) -> str:
    """[1, 2, 3, 5] -> "1-3, 5"."""
    out, start = [], layers[0]
    for a, b in zip(layers, layers[1:] + [None]):
        if b != a + 1:
            out.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)


def program_text(c: K3Config) -> str:
    """The whole plan as pseudo-code: each distinct layer body once, with the layers that run it (the docs'
    design page shows it, generated by scripts/gen_docs.py)."""
    bodies: dict[tuple[str, ...], list[int]] = {}
    for i in range(c.num_hidden_layers):
        bodies.setdefault(tuple(_step_text(s) for s in layer_steps(c, i)), []).append(i)
    lines = ["h = embed(ids)", "bank = []", f"for layer in 0..{c.num_hidden_layers - 1}:"]
    for n, (body, layers) in enumerate(bodies.items()):
        lines.append(f"    {'if' if n == 0 else 'elif'} layer in {{{_ranges(layers)}}}:")
        lines += ["        " + b for b in body]
    lines += [_step_text(s) for s in output_steps(c)]
    head = "embed_tokens" if c.tie_word_embeddings else "lm_head"
    return "\n".join(lines + [f"logits = {head}(x)"])
