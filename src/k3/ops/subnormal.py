"""Subnormal floats flushed to zero for the span of a computation, on every CPU thread that runs it.

x86 multiplies and adds subnormal numbers (below 1.2e-38 in fp32) through a microcode assist, about 100
times slower than normal ones. Chunked KDA makes them: its decay factors exp(G) fall below that range
over a 64-token chunk, and their products with keys and queries land in it. Flushed, such a value
reads as 0; every term it could contribute is below fp32's resolution of the sums it joins.

`torch.set_flush_denormal` changes only the calling thread, not the OpenMP pool that runs ATen's and
MKL's parallel loops, so the native helper sets the mode on every pool thread and restores it after.
"""

from __future__ import annotations

import contextlib

import torch

from k3.ops.native import native


@contextlib.contextmanager
def subnormals_flushed():
    """FTZ|DAZ on within the block (CPU; a no-op elsewhere); the previous mode is restored after."""
    kernels = native()
    if kernels is None:  # the calling thread only, and back to off after (torch cannot read the mode)
        torch.set_flush_denormal(True)
        try:
            yield
        finally:
            torch.set_flush_denormal(False)
        return
    before = kernels.set_flush_denormal(True)
    try:
        yield
    finally:
        kernels.set_flush_denormal(before)
