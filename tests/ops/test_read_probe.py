"""The read-bandwidth probe's kernel (read_probe.cpp) reads every byte: its sum is the wrapping sum of the
buffer's 8-byte words plus its last few bytes one by one, at every instruction set, whatever the threads'
shares (sizes off every vector and page boundary)."""

import pytest
import torch


def expected(buf: torch.Tensor) -> int:
    n = buf.numel() // 8 * 8
    words = buf[:n].view(torch.int64).tolist()
    return (sum(w & (2 ** 64 - 1) for w in words) + sum(buf[n:].tolist())) % 2 ** 64


@pytest.mark.parametrize("size", [7, 4096 * 3 + 257, (1 << 20) + 13])
def test_read_sum_reads_every_byte(kernels, level, size):
    buf = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=torch.Generator().manual_seed(size))
    assert kernels.read_sum(buf) == expected(buf)
    buf[size // 2] ^= 1                       # one bit anywhere changes it
    assert kernels.read_sum(buf) == expected(buf)
