"""Short causal depthwise convolution (fla ShortConvolution, no bias) with SiLU, carrying its tail state.

Reference: the ATen ops below (conv1d for prefill, tap sums for a few tokens). Native (fp32, outside
autograd): `short_conv_silu` in ops/native/kda.cpp, the taps added in order and SiLU as the native decode
step computes them (so a prefill token gets the decode step's bits), rows over threads, no transposed
copies (the reference's three convolutions spend a prefill's time on copies and conv calls). `k3.ops.dispatch` picks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3.ops.dispatch import register
from k3.ops.elementwise import silu
from k3.ops.harness import Example, randn
from k3.ops.native import native


def short_conv_silu_reference(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, T, C]; weight [C, K] (tap K-1 multiplies the current token); state [B, K-1, C] or None (zeros).

    Returns (silu(conv) [B, T, C] in x.dtype, new state [B, K-1, C] = the last K-1 inputs, in x.dtype).
    The convolution runs in fp32 (or wider).
    """
    B, T, C = x.shape
    K = weight.shape[-1]
    cdt = torch.promote_types(x.dtype, torch.float32)
    if state is None:
        state = x.new_zeros((B, K - 1, C))
    full = torch.cat((state.to(x.dtype), x), dim=1)
    new_state = full[:, full.shape[1] - (K - 1):]
    if T <= SMALL_T:  # decode: K multiply-adds beat a convolution call's set-up
        return silu(conv_taps(full.to(cdt), weight.to(cdt), T)).to(x.dtype), new_state
    y = F.conv1d(full.to(cdt).transpose(1, 2), weight.to(cdt).unsqueeze(1), groups=C)
    return silu(y).transpose(1, 2).to(x.dtype), new_state


SMALL_T = 4


def _short_conv_silu_native(x, weight, state=None):
    return tuple(native().short_conv_silu(x.contiguous(), weight, torch.empty(0) if state is None else state.contiguous()))


def _conv_examples(large: bool) -> list[Example]:
    P, Kc = (96 * 128, 4) if large else (11, 4)
    w = randn(P, Kc, seed=1, scale=0.5)
    return [Example(f"2 x {T} tokens x {P}{', from a state' if state else ''}",
                    (randn(2, T, P, seed=2), w, randn(2, Kc - 1, P, seed=3) if state else None))
            for T in (1, 9) for state in (False, True)]


short_conv_silu = register(
    "short_conv_silu", examples=_conv_examples, reference=short_conv_silu_reference, native=_short_conv_silu_native,
    supports=lambda x, weight, state=None: (x.dtype == weight.dtype == torch.float32 and x.dim() == 3 and weight.dim() == 2
                                            and (state is None or state.dtype == torch.float32)))


def conv_taps(full: torch.Tensor, weight: torch.Tensor, T: int) -> torch.Tensor:
    """full [B, K-1+T, C], weight [C, K] -> [B, T, C]: sum over taps of shifted inputs (same as conv1d)."""
    K = weight.shape[-1]
    y = full[:, 0:T] * weight[:, 0]
    for k in range(1, K):
        y = y + full[:, k:k + T] * weight[:, k]
    return y
