"""Progress off a terminal: a line about every 10 % and one at the end (CI logs), never one per item."""

import pytest

from k3.tools.progress import byte_progress, count_progress


def test_count_lines_every_tenth_then_done(capsys):
    with count_progress("requests", 200) as tick:
        for _ in range(200):
            tick()
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(": ")[1].split(" (")[0] for ln in lines[:-1]] == [f"{p} %" for p in range(10, 100, 10)]
    assert lines[-1].startswith("requests: done in ") and lines[-1].endswith("(200/200)")


def test_bytes_in_gigabytes_and_uneven_ticks(capsys):
    with byte_progress("writing tensors", 3_000_000_000) as tick:
        for n in (1_000_000_000, 5, 1_999_999_995):   # jumps past several tenths at once: one line each jump
            tick(n)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "writing tensors: 33 % (1.00 GB/3.00 GB)"     # the share done, crossing 30 %
    assert len(lines) == 2 and lines[1].startswith("writing tensors: done in ")


def test_disabled_is_silent_and_a_failure_prints_no_done(capsys):
    with count_progress("x", 10, enabled=False) as tick:
        for _ in range(10):
            tick()
    with pytest.raises(RuntimeError):
        with count_progress("y", 100) as tick:
            tick()
            raise RuntimeError("stop")
    assert capsys.readouterr().err == ""
