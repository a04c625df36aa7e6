"""MXFP4 experts: bit format, dequantize-then-matmul reference, and the tiled packed matmul."""

from k3.ops.mxfp4.format import MXFP4FormatError, check_pair, check_scales, pack_codes, unpack_codes
from k3.ops.mxfp4.linear import mxfp4_linear
from k3.ops.mxfp4.quantize import quantize
from k3.ops.mxfp4.reference import dequantize, mxfp4_linear_reference

__all__ = ["MXFP4FormatError", "check_pair", "check_scales", "dequantize", "mxfp4_linear",
           "mxfp4_linear_reference", "pack_codes", "quantize", "unpack_codes"]
