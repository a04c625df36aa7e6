"""KDA decay gate: per head and key channel log-decay g in (lower_bound, 0) (K3) or (-inf, 0); and
`kda_gates`, that gate with the delta rule's beta = sigmoid(b), as the layer needs both.

Reference: the ATen ops below. Native (fp32 decode rows, outside autograd): both in one call
(`kda_gates_rows`) instead of about a dozen small ops. `k3.ops.dispatch` picks.
"""

from __future__ import annotations

import torch

from k3.ops.dispatch import register
from k3.ops.elementwise import sigmoid, softplus
from k3.ops.harness import Example, randn
from k3.ops.native import MAX_ROWS, native
from k3.ops.precision import wide


def kda_gate(raw: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor, lower_bound: float | None) -> torch.Tensor:
    """raw [..., H, K] (= W_fb W_fa x); a_log [H] (already narrowed); dt_bias [H*K] -> g [..., H, K] fp32.

    K3 (lower_bound set): g = lb * sigmoid(exp(A_log[h]) * (raw + dt_bias)).
    Kimi-Linear (None):   g = -exp(A_log[h]) * softplus(raw + dt_bias).
    """
    H, K = raw.shape[-2:]
    cdt = torch.promote_types(raw.dtype, torch.float32)
    z = raw.to(cdt) + dt_bias.to(cdt).reshape(H, K)
    a = torch.exp(a_log.to(cdt)).reshape(H, 1)
    if lower_bound is not None:
        return lower_bound * sigmoid(a * z)
    return -a * softplus(z)


def kda_gates_reference(raw: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
                        lower_bound: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """raw [N, H, K] (= W_fb W_fa x), b [N, H] (= W_b x) -> (g [N, H, K] fp32, beta = sigmoid(b) [N, H] fp32)."""
    return kda_gate(raw, a_log, dt_bias, lower_bound), sigmoid(wide(b))


def _kda_gates_native(raw, b, a_log, dt_bias, lower_bound):
    N, H, K = raw.shape
    return tuple(native().kda_gates_rows(raw.reshape(N, H * K).contiguous(), b.contiguous(), a_log.contiguous(),
                                         dt_bias.contiguous(), lower_bound is not None, lower_bound or 0.0))


def _supports(raw, b, a_log, dt_bias, lower_bound) -> bool:
    return (raw.dim() == 3 and raw.shape[0] <= MAX_ROWS and b.shape == raw.shape[:2] and a_log.shape == raw.shape[1:2]
            and dt_bias.numel() == raw.shape[1] * raw.shape[2]
            and all(t.dtype == torch.float32 for t in (raw, b, a_log, dt_bias)))


def _gates_examples(large: bool) -> list[Example]:
    H, K = (96, 128) if large else (3, 11)
    return [Example(f"{n} tokens x {H} heads x {K}{', bounded' if bound else ''}",
                    (randn(n, H, K, seed=1), randn(n, H, seed=2), randn(H, seed=3, scale=0.5), randn(H * K, seed=4),
                     -5.0 if bound else None))
            for n in (1, 3) for bound in (False, True)]


kda_gates = register("kda_gates", examples=_gates_examples, reference=kda_gates_reference, native=_kda_gates_native, supports=_supports)
