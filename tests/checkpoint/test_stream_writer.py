"""StreamingShardWriter as a context manager: a finished block publishes the file, a failed one (or a
close that finds tensors missing) leaves neither the file nor its temporary."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from k3.checkpoint.stream_writer import StreamingShardWriter

SPECS = [("a", "F32", (2, 3)), ("b", "I8", (4,))]


def test_a_finished_block_publishes_the_file(tmp_path):
    a, b = torch.randn(2, 3), torch.arange(4, dtype=torch.int8)
    with StreamingShardWriter(tmp_path / "x.safetensors", SPECS) as w:
        w.write("a", a)
        w.write("b", b)
    got = load_file(str(tmp_path / "x.safetensors"))
    assert torch.equal(got["a"], a) and torch.equal(got["b"], b)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.safetensors"]


def test_a_failed_block_or_a_short_one_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="cut"):
        with StreamingShardWriter(tmp_path / "x.safetensors", SPECS) as w:
            w.write("a", torch.randn(2, 3))
            raise RuntimeError("cut")
    with pytest.raises(ValueError, match="not written"):
        with StreamingShardWriter(tmp_path / "y.safetensors", SPECS) as w:
            w.write("a", torch.randn(2, 3))
    assert list(tmp_path.iterdir()) == []
