import pytest
import torch

from k3.ops.mla import mla_absorbed, mla_naive, mla_sdpa
from k3.testing import assert_close


def _inputs(B, T, S, H=3, Dn=8, Dr=4, Dv=6, R=10, dtype=torch.float64):
    return (torch.randn(B, T, H, Dn, dtype=dtype), torch.randn(B, T, H, Dr, dtype=dtype),
            torch.randn(B, S, R, dtype=dtype), torch.randn(B, S, Dr, dtype=dtype),
            torch.randn(H, Dn, R, dtype=dtype), torch.randn(H, Dv, R, dtype=dtype))


@pytest.mark.parametrize("core", [mla_absorbed, mla_sdpa], ids=["absorbed", "sdpa"])
@pytest.mark.parametrize("T,S", [(1, 1), (1, 17), (5, 5), (4, 13), (64, 64), (33, 90)], ids=lambda x: str(x))
def test_fast_cores_equal_naive(core, T, S):
    """Absorbed (decode) and SDPA (prefill: its own causal mask from an empty cache, an offset mask when
    continuing one) against the naive reference, in fp64, fp32, and with bf16 weights widened at use."""
    args = _inputs(2, T, S)
    offset = S - T
    assert_close("fp64", core(*args, 12 ** -0.5, offset), mla_naive(*args, 12 ** -0.5, offset), 1e-12)
    args32 = tuple(a.float() for a in args)
    assert_close("fp32", core(*args32, 12 ** -0.5, offset), mla_naive(*args32, 12 ** -0.5, offset), 1e-5)
    w16 = (*args32[:4], args32[4].bfloat16(), args32[5].bfloat16())
    ref16 = mla_naive(*args32[:4], args32[4].bfloat16().float(), args32[5].bfloat16().float(), 12 ** -0.5, offset)
    assert_close("bf16 weights", core(*w16, 12 ** -0.5, offset), ref16, 1e-5)


def test_naive_is_causal_and_uses_extra_key():
    q_nope, q_x, c_kv, k_x, w_uk, w_uv = _inputs(1, 4, 4)
    out = mla_naive(q_nope, q_x, c_kv, k_x, w_uk, w_uv, 0.3, 0)
    c2, k2 = c_kv.clone(), k_x.clone()
    c2[:, 3] += 1.0
    k2[:, 3] += 1.0
    out2 = mla_naive(q_nope, q_x, c2, k2, w_uk, w_uv, 0.3, 0)
    assert torch.equal(out[:, :3], out2[:, :3])          # future tokens never leak back
    assert not torch.allclose(out[:, 3], out2[:, 3])
    k3 = k_x.clone()
    k3[:, 0] += 1.0
    assert not torch.allclose(mla_naive(q_nope, q_x, c_kv, k3, w_uk, w_uv, 0.3, 0)[:, 1:], out[:, 1:])
