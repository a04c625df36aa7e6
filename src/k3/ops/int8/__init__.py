"""int8 trunk weights: symmetric int8 with one bf16 scale per 32 inputs, the reference, the packed matmul."""

from k3.ops.int8.format import (GROUP, Int8FormatError, check_int8_pair, check_int8_scales, dequantize, quantize,
                                scale_shape)
from k3.ops.int8.linear import int8_linear, int8_linear_reference

__all__ = ["GROUP", "Int8FormatError", "check_int8_pair", "check_int8_scales", "dequantize", "int8_linear", "int8_linear_reference",
           "quantize", "scale_shape"]
