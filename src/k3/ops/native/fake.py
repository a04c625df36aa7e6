"""Fake (meta) kernels for the torch operators the native build registers (torch.ops.k3.*, bindings.cpp):
each gives an op's outputs' shapes and dtypes from its inputs' without reading data. With them the
operators work on meta tensors (shape checks and memory plans without weights), under FakeTensorMode,
and in torch.compile / torch.export graphs, as operators torch can trace instead of graph breaks.

Shapes follow the kernels' own allocations (x [N, K] against w [O, K] gives [N, O], and so on);
`tests/ops/test_operator_schemas.py` checks every one against its kernel on the op examples with
torch.library.opcheck.

One operator has none: int8_quantize_into returns whether every weight row was finite, which only the
data can say (it prepares weights once at load and never runs inside a traced forward).
"""

from __future__ import annotations

import torch

from k3.config.once import once

WITHOUT_FAKE = frozenset({"int8_quantize_into"})


def _rows(x: torch.Tensor, width: int) -> torch.Tensor:
    """A [N, width] fp32 result for the N rows of x (every product kernel writes x's dtype, fp32)."""
    return x.new_empty((x.shape[0], width))


def _linears(lib) -> None:
    lib("bf16_linear", lambda x, w: _rows(x, w.shape[0]))
    lib("bf16_gemm", lambda x, w: _rows(x, w.shape[0]))
    lib("bf16_dot_gemm", lambda x, w: _rows(x, w.shape[0]))
    lib("bf16_widen", lambda w: w.new_empty(w.shape, dtype=torch.float32))
    lib("bf16_head_linear", lambda x, w, transpose: x.new_empty(
        (x.shape[0], w.shape[0], w.shape[2] if transpose else w.shape[1])))
    lib("int8_linear", lambda x, q, s: _rows(x, q.shape[0]))
    lib("int8_dequantize", lambda q, s: q.new_empty(q.shape, dtype=torch.float32))
    lib("mxfp4_linear", lambda x, packed, scale: _rows(x, packed.shape[0]))
    lib("mxfp4_gemm", lambda x, packed, scale: _rows(x, packed.shape[0]))
    lib("mxfp4_dot_gemm", lambda x, packed, scale: _rows(x, packed.shape[0]))
    lib("mxfp4_dequantize", lambda packed, scale: packed.new_empty(
        (packed.shape[0], packed.shape[1] * 2), dtype=torch.float32))
    # an expert maps x [N, D] back to [N, D] (W2 is [D, I]); a bank's mix has x's shape
    lib("mxfp4_glu_expert", lambda x, w, act, beta, linear_beta: torch.empty_like(x))
    lib("mxfp4_moe_token", lambda x, bank, ids, weights, act, beta, linear_beta: torch.empty_like(x))
    lib("mxfp4_moe_tokens", lambda x, bank, ids, weights, act, beta, linear_beta: torch.empty_like(x))


def _kda(q, k, v, wq, wk, wv, tq, tk, tv, S, index, g, beta, scale):
    """kda_decode_slots: q [n, H*K] -> [n, H, V]; kda_window_slots: q [n, T, H*K] -> [n, T, H, V]
    (H and V from the state pool S [slots, H, K, V])."""
    return q.new_empty((*q.shape[:-1], S.shape[1], S.shape[3]))


def _attention(lib) -> None:
    lib("kda_decode_slots", _kda)
    lib("kda_window_slots", _kda)
    lib("kda_chunk", lambda q, k, v, g, beta, scale, initial_state, chunk: [
        q.new_empty((*q.shape[:3], v.shape[3])), q.new_empty((q.shape[0], q.shape[2], q.shape[3], v.shape[3]))])
    lib("short_conv_silu", lambda x, w, state: [
        torch.empty_like(x), x.new_empty((x.shape[0], w.shape[1] - 1, x.shape[2]))])
    lib("kda_gates_rows", lambda raw, b, a_log, dt_bias, bounded, lower_bound: [
        raw.new_empty((raw.shape[0], b.shape[1], raw.shape[1] // b.shape[1])), raw.new_empty(b.shape)])
    # q [n, H, rank + rope] -> [n, H, rank]
    lib("mla_paged_decode", lambda q, pool, tables, lens, block_size, rank, scale: q.new_empty(
        (q.shape[0], q.shape[1], rank)))


def _rows_ops(lib) -> None:
    lib("attn_res_mix", lambda cands, query, eps: torch.empty_like(cands[0]))
    lib("attn_res_mix_weights", lambda cands, norm, proj, eps: torch.empty_like(cands[0]))
    lib("rms_norm_rows", lambda x, w, eps: torch.empty_like(x))
    lib("gated_rms_norm_rows", lambda x, gate, w, eps: torch.empty_like(x))
    lib("glu_rows", lambda g, u, act, beta, linear_beta: torch.empty_like(g))
    lib("moe_route_rows", lambda logits, bias, top_k, renormalise, scaling: [
        logits.new_empty((logits.shape[0], top_k)), logits.new_empty((logits.shape[0], top_k), dtype=torch.long)])


@once
def register() -> None:
    """Register every fake, once (after the native build loaded, so the operators exist)."""

    def lib(name, fn):
        torch.library.register_fake(f"k3::{name}", fn)

    _linears(lib)
    _attention(lib)
    _rows_ops(lib)
