"""Chunked KDA for prefill (spec §4.3): matmuls inside a chunk, the recurrence across chunks.

Within a chunk with cumulative log-decay G_t = sum_{tau<=t} g_tau (per key channel):
  L[i,j] = beta_i sum_d k_id k_jd exp(G_id - G_jd) (j < i);  T = (I + L)^-1 diag(beta)
  w = T (exp(G) * k);  u = T v;  v' = u - w S
  o = (s q * exp(G)) S + A_qk v',   A_qk[i,j] = sum_d s q_id k_jd exp(G_id - G_jd) (j <= i)
  S <- Diag(exp(G_last)) S + (exp(G_last - G) * k)^T v'
K3's gates reach -5 per token, so G falls to about -320 over 64 tokens: exp(-G) alone overflows
fp32. Every exponential here is of a non-positive difference; see `_decayed_products`.

Reference: the torch form below (matmuls over every chunk and head at once; differentiable). Native
(fp32 on the CPU, outside autograd): `kda_chunk` (ops/native/kda_chunk.cpp), the same equations one
(sequence, head) at a time with the decay exponentials taken per key channel, several times faster at
K3's head sizes (benchmarks/forward.py). `k3.ops.dispatch` picks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from k3.ops.dispatch import register
from k3.ops.harness import Example, randn
from k3.ops.native import native
from k3.ops.subnormal import subnormals_flushed

CHUNK = 64
SUB_CHUNK = 16


def chunk_kda_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                        scale: float, initial_state: torch.Tensor | None = None, chunk_size: int = CHUNK
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as `recurrent_kda`: q, k, g [B, T, H, K]; v [B, T, H, V]; beta [B, T, H].

    Returns (o [B, T, H, V], final state [B, H, K, V]) in fp32 (or fp64 for fp64 inputs). Subnormal
    intermediates are flushed to zero on CPU (see ops/subnormal.py): x86 multiplies them through a slow microcode assist.
    """
    if q.device.type != "cpu":
        return _chunk_kda(q, k, v, g, beta, scale, initial_state, chunk_size)
    with subnormals_flushed():
        return _chunk_kda(q, k, v, g, beta, scale, initial_state, chunk_size)


def _chunk_kda_native(q, k, v, g, beta, scale, initial_state=None, chunk_size=CHUNK):
    state = torch.empty(0) if initial_state is None else initial_state
    with subnormals_flushed():
        o, final = native().kda_chunk(*(t.contiguous() for t in (q, k, v, g, beta)), float(scale), state, chunk_size)
    return o, final


def _fp32_chunk_inputs(q, k, v, g, beta, scale, initial_state=None, chunk_size=CHUNK) -> bool:
    tensors = (q, k, v, g, beta) if initial_state is None else (q, k, v, g, beta, initial_state)
    return all(t.dtype == torch.float32 for t in tensors) and q.dim() == 4 and chunk_size >= 1


def _chunk_examples(large: bool) -> list[Example]:
    from k3.ops.norm import l2_norm

    B, T, H, K, V = (1, 256, 4, 128, 128) if large else (2, 45, 2, 5, 7)
    q, k = (l2_norm(randn(B, T, H, K, seed=s)) for s in (1, 2))
    g = -torch.rand(B, T, H, K, generator=torch.Generator().manual_seed(3)) * 0.5
    beta = torch.sigmoid(randn(B, T, H, seed=4))
    args = (q, k, randn(B, T, H, V, seed=5), g, beta, K ** -0.5)
    return [Example(f"{B} x {T} tokens, {H} heads, K {K}, V {V}", args),
            Example(f"{B} x {T} tokens from a state, chunks of 16", (*args, randn(B, H, K, V, seed=6), 16))]


chunk_kda = register("kda_chunk", examples=_chunk_examples, reference=chunk_kda_reference, native=_chunk_kda_native, supports=_fp32_chunk_inputs)


def _chunk_kda(q, k, v, g, beta, scale, initial_state, chunk_size):
    B, T, H, K = k.shape
    V = v.shape[-1]
    cdt = torch.promote_types(q.dtype, torch.float32)
    pad = (-T) % chunk_size
    # Padding after the last token: k = v = q = beta = 0 and g = 0 leave outputs and state unchanged.
    q, k, g = (_chunks(F.pad(t.to(cdt), (0, 0, 0, 0, 0, pad)), chunk_size) for t in (q, k, g))
    v = _chunks(F.pad(v.to(cdt), (0, 0, 0, 0, 0, pad)), chunk_size)
    beta = F.pad(beta.to(cdt), (0, 0, 0, pad)).transpose(1, 2).unflatten(-1, (-1, chunk_size))
    G = g.cumsum(-2)                                          # [B, H, N, C, K]
    w, u = _wy_representation(k, v, G, beta)
    qs = q * scale
    a_qk = _decayed_products(qs, k, G, strict=False)          # [B, H, N, C, C]
    q_decayed = qs * torch.exp(G)
    g_last = G[..., -1:, :]                                   # [B, H, N, 1, K]
    k_to_end = torch.exp(g_last - G) * k
    decay_all = torch.exp(g_last).transpose(-1, -2)           # [B, H, N, K, 1]
    S = q.new_zeros((B, H, K, V)) if initial_state is None else initial_state.to(cdt)
    out = q.new_empty(v.shape)
    for n in range(q.shape[2]):
        v_new = u[:, :, n] - w[:, :, n] @ S
        out[:, :, n] = q_decayed[:, :, n] @ S + a_qk[:, :, n] @ v_new
        S = decay_all[:, :, n] * S + k_to_end[:, :, n].transpose(-1, -2) @ v_new
    o = out.flatten(2, 3)[:, :, :T].transpose(1, 2)
    return o, S


def _chunks(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """[B, T, H, D] -> [B, H, N, C, D]."""
    return x.transpose(1, 2).unflatten(2, (-1, chunk))


def _wy_representation(k, v, G, beta):
    """w = T (exp(G) k), u = T v with T = (I + L)^-1 diag(beta); all [B, H, N, C, *]."""
    C = k.shape[-2]
    L = beta.unsqueeze(-1) * _decayed_products(k, k, G, strict=True)
    eye = torch.eye(C, dtype=k.dtype, device=k.device)
    T = torch.linalg.solve_triangular(eye + L, torch.diag_embed(beta), upper=False, unitriangular=True)
    return T @ (torch.exp(G) * k), T @ v


def _decayed_products(a, b, G, strict: bool, sub: int = SUB_CHUNK) -> torch.Tensor:
    """M[i, j] = sum_d a_id b_jd exp(G_id - G_jd) for j < i (strict) or j <= i, else 0. [..., C, C].

    Rows go in blocks of `sub` starting at r. For columns j < r the decay factors through G_r:
    exp(G_i - G_r) * exp(G_r - G_j), both exponents <= 0 because G never increases. Inside the
    diagonal block the differences are taken pairwise, masked before the exponential.
    """
    C = a.shape[-2]
    M = a.new_zeros(a.shape[:-1] + (C,))
    factor = _diagonal_factors(a, b, G, sub)
    for r in range(0, C, sub):
        e = min(r + sub, C)
        G_r = G[..., r:r + 1, :]
        if r > 0:
            a_blk = a[..., r:e, :] * torch.exp(G[..., r:e, :] - G_r)
            b_prev = b[..., :r, :] * torch.exp(G_r - G[..., :r, :])
            M[..., r:e, :r] = a_blk @ b_prev.transpose(-1, -2)
        keep = torch.ones(e - r, e - r, dtype=torch.bool, device=a.device).tril(-1 if strict else 0)
        if factor:
            # Split through the block's middle row m: both factors lie within exp(+-half span).
            G_m = G[..., (r + e) // 2:(r + e) // 2 + 1, :]
            a_mid = a[..., r:e, :] * torch.exp(G[..., r:e, :] - G_m)
            b_mid = b[..., r:e, :] * torch.exp(G_m - G[..., r:e, :])
            M[..., r:e, r:e] = (a_mid @ b_mid.transpose(-1, -2)).masked_fill(~keep, 0.0)
        else:
            diff = G[..., r:e, None, :] - G[..., None, r:e, :]
            decay = torch.exp(diff.masked_fill(~keep.unsqueeze(-1), float("-inf")))
            M[..., r:e, r:e] = torch.einsum("...id,...jd,...ijd->...ij", a[..., r:e, :], b[..., r:e, :], decay)
    return M


# Factoring a diagonal block through its middle row m splits exp(G_i - G_j) into exp(G_i - G_m) and
# exp(G_m - G_j), each within exp(+-half span). Safe while exp(-half span) keeps both far from the
# subnormal range (prefill flushes subnormals to zero) and |a| |b| K exp(span) (the masked-out upper
# triangle's products) stays far below fp32's 3.4e38.
SAFE_HALF_SPAN = 40.0
SAFE_LOG = 85.0


def _max_abs(t: torch.Tensor) -> torch.Tensor:
    """max |t| as a 0-d tensor, in one pass over a strided view (abs() would first copy it whole)."""
    lo, hi = torch.aminmax(t)
    return torch.maximum(-lo, hi)


def _diagonal_factors(a, b, G, sub: int) -> bool:
    """Whether the diagonal blocks can be one matmul each instead of sub x sub x K pairwise
    exponentials: within every block, G falls by at most SAFE_HALF_SPAN on each side of the middle
    row, and no product can overflow. K3's gates (-5 a token at their lower bound) allow 80 over 16
    tokens; steeper blocks (or unbounded Kimi-Linear gates) take the pairwise form. Never under
    autograd: the backward would meet the large factors unbounded."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (a, b, G)):
        return False
    if not G.numel():
        return True
    C = G.shape[-2]
    starts = torch.arange(0, C, sub, device=G.device)
    ends = (starts + sub).clamp(max=C)
    first, mid, last = G[..., starts, :], G[..., (starts + ends) // 2, :], G[..., ends - 1, :]
    half = torch.maximum(first - mid, mid - last).amax().item()
    span = (first - last).amax().item()
    scale = (_max_abs(a) * _max_abs(b) * a.shape[-1]).item()
    return half <= SAFE_HALF_SPAN and (scale == 0.0 or span + math.log(scale) <= SAFE_LOG)
