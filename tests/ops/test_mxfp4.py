import pytest
import torch

from k3.ops.mxfp4 import MXFP4FormatError, dequantize, mxfp4_linear, mxfp4_linear_reference, pack_codes, unpack_codes
from k3.testing import assert_close


def test_decode_matches_hand_computed_values():
    # Row 0, bytes 0x21 0xF8: columns (low nibble first) = codes 1, 2, 8, 15 -> 0.5, 1.0, -0.0, -6.0.
    # 32-wide groups: pad the row with zero bytes to 16 bytes (32 columns); scale byte 128 -> 2**1.
    packed = torch.zeros(2, 16, dtype=torch.uint8)
    packed[0, 0], packed[0, 1] = 0x21, 0xF8
    packed[1, 15] = 0x7E  # columns 30, 31 = codes 14 (-4.0), 7 (6.0)
    scale = torch.tensor([[128], [120]], dtype=torch.uint8)
    w = dequantize(packed, scale)
    assert w.shape == (2, 32)
    assert w[0, :4].tolist() == [1.0, 2.0, -0.0, -12.0]
    assert torch.signbit(w[0, 2])
    assert w[0, 4:].abs().sum() == 0
    assert w[1, 30].item() == -4.0 * 2.0 ** -7 and w[1, 31].item() == 6.0 * 2.0 ** -7


def test_scale_extremes_are_exact():
    packed = torch.full((1, 16), 0x22, dtype=torch.uint8)  # every code = 2 -> 1.0
    for s, expected in ((0, 2.0 ** -127), (127, 1.0), (254, 2.0 ** 127)):
        w = dequantize(packed, torch.tensor([[s]], dtype=torch.uint8))
        assert w[0, 0].item() == expected


def test_scale_255_is_rejected():
    packed = torch.zeros(1, 16, dtype=torch.uint8)
    with pytest.raises(MXFP4FormatError, match="255"):
        dequantize(packed, torch.tensor([[255]], dtype=torch.uint8))


def test_pack_unpack_round_trip():
    codes = torch.randint(0, 16, (5, 64), dtype=torch.uint8)
    assert torch.equal(unpack_codes(pack_codes(codes)), codes)


@pytest.mark.parametrize("rows,cols,n,tile", [(37, 96, 3, 1024), (2050, 64, 5, 1024), (100, 32, 1, 16)])
def test_packed_linear_matches_dequantized_reference(rows, cols, n, tile):
    packed = torch.randint(0, 256, (rows, cols // 2), dtype=torch.uint8)
    scale = torch.randint(118, 130, (rows, cols // 32), dtype=torch.uint8)
    x = torch.randn(n, cols)
    ref = mxfp4_linear_reference(x, packed, scale)
    assert_close("mxfp4_linear", mxfp4_linear(x, packed, scale, row_tile=tile), ref, 1e-6)
    assert_close("mxfp4_linear fp64", mxfp4_linear(x.double(), packed, scale, row_tile=tile),
                 mxfp4_linear_reference(x.double(), packed, scale), 1e-14)


def test_quantize_is_exact_on_mxfp4_input_and_does_not_clip():
    from k3.ops.mxfp4 import quantize
    packed = torch.randint(0, 256, (16, 64), dtype=torch.uint8)
    scale = torch.randint(110, 140, (16, 4), dtype=torch.uint8)
    w = dequantize(packed, scale)
    assert torch.equal(dequantize(*quantize(w)), w)            # values already on the grid come back exactly
    x = torch.randn(8, 96) * 0.05
    q = dequantize(*quantize(x))
    # Per 32-group, the largest magnitude is kept within one grid step (no saturation at 6 * scale).
    assert (x.abs().amax(-1) - q.abs().amax(-1)).abs().max() <= 0.25 * x.abs().amax()
    assert_close("gaussian quantisation error", q, x, 0.15)
    zeros = dequantize(*quantize(torch.zeros(2, 32)))
    assert torch.equal(zeros, torch.zeros(2, 32)) and not torch.signbit(zeros).any()
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize(torch.randn(2, 40))


def test_quantize_bytes_match_hand_computed_codes_ties_and_scales():
    """Hand-computed bytes: ties round to the even code; the scale is 2^ceil(log2(amax / 6)), so a
    group whose amax is 7 takes scale 2 (7/2 = 3.5 ties up to 4: value 8, not clipped to 6)."""
    from k3.ops.mxfp4 import quantize

    w = torch.zeros(4, 32, dtype=torch.float64)
    # scale 1: 6 -> 7; 0.25 (0 | 0.5) -> 0; 0.75 (0.5 | 1) -> 2; 1.25 (1 | 1.5) -> 2; 1.75 (1.5 | 2) -> 4;
    # 2.5 (2 | 3) -> 4; 3.5 (3 | 4) -> 6; 5 (4 | 6) -> 6; -0.75 -> 8 + 2; -5 -> 8 + 6.
    w[0, :10] = torch.tensor([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.75, -5], dtype=torch.float64)
    w[1, :2] = torch.tensor([3.0, 1.25])          # amax 3: scale 1/2; 6 -> 7, 2.5 -> 4
    w[2, 0] = 7.0                                 # amax 7: scale 2; 3.5 -> 6 (value 8)
    packed, scale = quantize(w)
    assert packed[0, :5].tolist() == [0x07, 0x22, 0x44, 0x66, 0xEA] and not packed[0, 5:].any()
    assert packed[1, 0] == 0x47 and not packed[1, 1:].any()
    assert packed[2, 0] == 0x06 and not packed[3].any()
    assert scale[:, 0].tolist() == [127, 126, 128, 0]   # E8M0: 2^(byte - 127); an all-zero group takes 0
    assert dequantize(packed, scale)[2, 0] == 8.0
