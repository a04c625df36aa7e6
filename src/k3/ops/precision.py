"""The precision contract's "in fp32" means at least fp32: fp64 reference runs stay fp64."""

from __future__ import annotations

import torch


def wide(x: torch.Tensor) -> torch.Tensor:
    """x in fp32, or unchanged when it is already fp32 or wider."""
    if x.dtype in _WIDE:  # decode calls this dozens of times a step: skip the no-op cast's dispatch
        return x
    return x.to(torch.promote_types(x.dtype, torch.float32))


_WIDE = (torch.float32, torch.float64)
