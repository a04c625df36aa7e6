"""GLU activations: K3's SiTU-GLU and the SiLU-GLU of Kimi-Linear.

Reference: the ATen ops below. Native (fp32, outside autograd): one vectorised call (`glu_rows`, the
routed experts' own activation; equal up to the last bits of tanh and exp) instead of a dozen small
ops, split over threads for prefill-sized inputs (a 512-token prefill's SiTU activations took about
0.1 s as ATen ops). `k3.ops.dispatch` picks.
"""

from __future__ import annotations

import torch

from k3.ops.dispatch import register
from k3.ops.elementwise import STEP, padded, silu
from k3.ops.harness import Example, randn
from k3.ops.native import native
from k3.ops.precision import wide


def situ_glu(gate: torch.Tensor, up: torch.Tensor, beta: float, linear_beta: float | None) -> torch.Tensor:
    """[beta*tanh(g/beta)*sigmoid(g)] * [linear_beta*tanh(u/linear_beta)], in fp32, returned in up.dtype.

    With linear_beta None the up branch is not soft-clipped.
    """
    g = wide(gate)
    u = wide(up)
    if torch.is_grad_enabled() and (g.requires_grad or u.requires_grad):
        a = beta * torch.tanh(g / beta) * torch.sigmoid(g)
        if linear_beta is not None:
            u = linear_beta * torch.tanh(u / linear_beta)
        return (a * u).to(up.dtype)
    # Inference: the same operations in the same order (so the same bits), in place on three buffers,
    # padded so that every element takes the SIMD path whatever the size (see k3.ops.elementwise).
    shape, n = g.shape, g.numel()
    if n % STEP:
        g, u = padded(g), padded(u)
    a = torch.div(g, beta).tanh_().mul_(beta).mul_(torch.sigmoid(g))
    if linear_beta is not None:
        u = torch.div(u, linear_beta).tanh_().mul_(linear_beta)
    return a.mul_(u)[:n].view(shape).to(up.dtype)


def silu_glu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return silu(gate) * up


def glu_reference(gate: torch.Tensor, up: torch.Tensor, act: str, beta: float, linear_beta: float | None) -> torch.Tensor:
    """gate, up [..., I] -> [..., I]: SiTU-GLU (act "situ") or SiLU-GLU."""
    if act == "situ":
        return situ_glu(gate, up, beta, linear_beta)
    return silu_glu(gate, up)


def _glu_native(gate, up, act, beta, linear_beta):
    return native().glu_rows(gate.contiguous(), up.contiguous(), 0 if act == "situ" else 1, beta, linear_beta or 0.0)


def _fp32_pair(gate, up, act, beta, linear_beta) -> bool:
    return act in ("situ", "silu") and gate.dtype == up.dtype == torch.float32 and gate.shape == up.shape and gate.dim() >= 1


def _glu_examples(large: bool) -> list[Example]:
    I = 3072 if large else 41
    return [Example(f"{n} x {I}, {act}", (randn(n, I, seed=1, scale=3.0), randn(n, I, seed=2), act, 1.0, lb))
            for n in (1, 6) for act, lb in (("situ", None), ("situ", 0.5), ("silu", None))]


glu = register("glu", examples=_glu_examples, reference=glu_reference, native=_glu_native, supports=_fp32_pair)
