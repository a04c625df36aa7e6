"""The loader's int8 trunk pieces: which Linears hold int8, quantising a stored float matrix as it is
read (trunk="int8" at load), and checking stored scales.

A matrix is read in blocks of rows with positioned reads into one small buffer, never through the
shard's map (mapped pages stay in the process while the shard's other tensors hold the map, and the
bf16 trunk would stay with them), and each block is quantised straight into the codes and scales
allocated for it. Peak memory is the int8 trunk plus a few MB.
"""

from __future__ import annotations

import torch
from torch import nn

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.layout import ExpectedTensor, int8_target
from k3.checkpoint.reader import TEXT_PREFIX, TORCH_FLOATS, CheckpointReader
from k3.streaming.trunk import LAYER
from k3.ops.int8 import Int8FormatError, check_int8_scales, quantize, scale_shape
from k3.ops.int8.format import BLOCK


def int8_weights(model: nn.Module, specs: list[ExpectedTensor], quantise: bool, streamed_layers: tuple[int, ...]) -> set[str]:
    """The weight names held as int8 (stored so, or quantised at load outside the streamed layers, which
    are read as stored), their Linears turned int8 before anything is allocated."""
    names = {s.name for s in specs if s.dtype == "I8"}
    if quantise:
        streamed = set(streamed_layers)
        names |= {s.name for s in specs if int8_target(s) and int(LAYER.match(s.name).group(1)) not in streamed}
    for name in names:
        model.get_submodule(name.rpartition(".")[0]).make_int8()
    return names


def quantised(reader: CheckpointReader, name: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A stored float matrix -> new (codes int8 [out, in], scales bf16 [out, groups]) on `device`."""
    out, inp = reader.info(name)[0]
    q = torch.empty((out, inp), dtype=torch.int8)
    scale = torch.empty(scale_shape(out, inp), dtype=torch.bfloat16)
    quantise_into(reader, name, q, scale)
    return q.to(device), scale.to(device)


def quantise_into(reader: CheckpointReader, name: str, q: torch.Tensor, scale: torch.Tensor) -> None:
    """Quantise the stored float matrix `name` into q [out, in] and scale [out, groups] (CPU, contiguous)."""
    (out, inp), dtype = reader.info(name)
    rows = max(1, BLOCK // inp)
    buf = torch.empty((min(rows, out), inp), dtype=TORCH_FLOATS[dtype])
    row_bytes = inp * buf.element_size()
    try:
        for r in range(0, out, rows):
            block = buf[:min(rows, out - r)]
            reader.read_into(name, block, start=r * row_bytes)
            q[r:r + len(block)], scale[r:r + len(block)] = quantize(block)
    except Int8FormatError as e:
        file, stored = reader.locate(name)
        raise CheckpointError(str(e), file=file, tensor=stored) from None


def check_stored_scales(t: torch.Tensor, name: str) -> None:
    try:
        check_int8_scales(t, TEXT_PREFIX + name)
    except Int8FormatError as e:
        raise CheckpointError(str(e), tensor=TEXT_PREFIX + name) from None
