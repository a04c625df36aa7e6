"""`once`: the first call's value, kept until cache_clear(), and readable inside a torch.compile trace."""

from __future__ import annotations

import torch

from k3.config.once import once


def test_once_computes_on_the_first_call_and_forgets_on_cache_clear():
    calls = []

    @once
    def probe():
        calls.append(1)
        return len(calls)

    assert probe() == 1 and probe() == 1 and calls == [1]
    probe.cache_clear()
    assert probe() == 2 and calls == [1, 1]


def test_a_compiled_function_reads_the_kept_value_without_running_the_probe():
    opened = []

    @once
    def scale():
        opened.append(open(__file__).read(1))   # a probe Dynamo cannot trace (file I/O)
        return 3.0

    scale()
    compiled = torch.compile(lambda x: x * scale(), fullgraph=True, backend="eager")
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 3.0)) and len(opened) == 1
