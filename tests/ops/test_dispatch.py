"""The kernel registry: one rule decides native vs reference for every op."""

from __future__ import annotations

import torch

from k3.ops import dispatch
from k3.ops.attnres import attn_res_mix
from k3.ops.linear import linear

EXPECTED = {"kda_window", "bf16_linear", "bf16_head_linear", "attn_res_mix", "mxfp4_dequantize", "mxfp4_linear",
            "mxfp4_glu_expert", "mxfp4_moe_token", "mxfp4_moe_tokens", "kda_step", "mla_paged_decode",
            "attn_res", "kda_gates", "gated_rms_norm", "rms_norm", "moe_route", "glu"}


def test_every_native_op_is_registered_with_its_reference():
    import k3.ops.kda  # noqa: F401  (registration happens at import)
    import k3.ops.mla  # noqa: F401
    import k3.ops.mxfp4.expert  # noqa: F401

    assert EXPECTED <= set(dispatch.REGISTRY)
    for kernel in dispatch.REGISTRY.values():
        assert callable(kernel.reference) and callable(kernel.native) and callable(kernel.supports)


def test_one_rule_cpu_outside_autograd_and_not_forced(kernels):
    x, w = torch.randn(2, 33), torch.randn(17, 33).bfloat16()
    assert linear.use_native(x, w)
    assert not linear.use_native(x.to("meta"), w), "a tensor off the CPU must take the reference"
    with torch.enable_grad():
        assert not linear.use_native(x.requires_grad_(), w), "autograd must see the reference"
    x = x.detach()
    with dispatch.reference_only():
        assert not linear.use_native(x, w)
        ref = linear(x, w)
    assert linear.use_native(x, w), "reference_only ends with its block"
    torch.testing.assert_close(linear(x, w), ref)
    assert not linear.use_native(x, w.float()), "supports: bf16 weights only (an fp32 one is already wide)"


def test_lists_of_tensors_are_checked_too(kernels):
    rows = [torch.randn(3, 20) for _ in range(3)]
    query = torch.randn(20)
    assert attn_res_mix.use_native(rows, query, 1e-6)
    assert not attn_res_mix.use_native(rows[:2] + [rows[2].to("meta")], query, 1e-6)


def test_training_gradients_flow_through_the_references(kernels):
    x = torch.randn(2, 33, requires_grad=True)
    w = torch.randn(17, 33, requires_grad=True)
    linear(x, w).sum().backward()
    assert x.grad is not None and w.grad is not None
