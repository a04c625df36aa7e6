"""benchmarks/interleaved.py and decode_child.py: engines decoding in turns from long-lived processes.

The summary is checked on hand-computed values, the turn order on stand-in decoders, and the child
protocol on real processes: k3 on a tiny checkpoint, and llama.cpp on its conversion when the anchor is
built (CI builds it; see tests/model/test_llama_cpp_parity.py).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

from k3.config.presets import tiny_chat
from k3.testing import make_checkpoint
from k3.testing.llama_cpp import cache_dir, convert, is_built

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from interleaved import Decoder, interleave, summarize_interleaved  # noqa: E402


def test_summary_averages_each_engine_over_the_same_rounds():
    # 10 tokens a round; bandwidth 50, 40, 60 GB/s around two rounds; 1 GB read a token
    measured = {"seconds": {"k3": [0.25, 0.20], "llama.cpp": [0.30, 0.30]}, "samples": [50e9, 40e9, 60e9]}
    r = summarize_interleaved(measured, 10, {"k3": int(1e9), "llama.cpp": int(1e9)}, [("k3", "llama.cpp")])
    assert r["decode_tok_s"] == pytest.approx({"k3": 20 / 0.45, "llama.cpp": 20 / 0.6})
    assert r["decode_ratio_k3_over_llama.cpp"] == pytest.approx(0.6 / 0.45)
    assert r["decode_ratio_k3_over_llama.cpp_per_round"] == pytest.approx([0.30 / 0.25, 0.30 / 0.20])
    # round floors: 1 / max(50, 40) and 1 / max(40, 60) seconds a token; k3 takes 25 and 20 ms a token
    assert r["decode_over_floor"]["k3"] == pytest.approx((0.025 * 50 + 0.020 * 60) / 2)
    assert r["decode_over_floor"]["llama.cpp"] == pytest.approx((0.030 * 50 + 0.030 * 60) / 2)
    assert r["rounds"] == 2
    # the slower round (50 GB/s) and the faster (60 GB/s), each its own half
    assert r["decode_ratio_k3_over_llama.cpp_by_bandwidth"] == [
        {"bandwidth_bytes_s": 50e9, "ratio": pytest.approx(0.30 / 0.25)},
        {"bandwidth_bytes_s": 60e9, "ratio": pytest.approx(0.30 / 0.20)}]


def test_halves_split_the_rounds_by_their_bandwidth():
    samples = [70e9, 40e9, 45e9, 72e9, 71e9]   # rounds at 70, 45, 72, 72 GB/s (the higher sample of each)
    seconds = {"k3": [0.1, 0.2, 0.1, 0.1], "llama.cpp": [0.13, 0.22, 0.12, 0.14]}
    r = summarize_interleaved({"seconds": seconds, "samples": samples}, 5, dict.fromkeys(seconds, int(1e9)),
                              [("k3", "llama.cpp")])
    slow, fast = r["decode_ratio_k3_over_llama.cpp_by_bandwidth"]
    assert slow == {"bandwidth_bytes_s": statistics.median([70e9, 45e9]), "ratio": pytest.approx(0.35 / 0.3)}
    assert fast == {"bandwidth_bytes_s": 72e9, "ratio": pytest.approx(0.26 / 0.2)}


class Recorder:
    """Stands in for a Decoder: logs each turn into a shared list."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def decode(self, tokens: int) -> float:
        self.log.append((self.name, tokens))
        return 0.01 * tokens


def test_turns_alternate_who_goes_first_and_sample_around_every_round():
    log, samples = [], iter(range(100))
    decoders = {"a": Recorder("a", log), "b": Recorder("b", log)}
    m = interleave(decoders, 3, 4, lambda: float(next(samples)))
    assert log == [("a", 4), ("b", 4), ("b", 4), ("a", 4), ("a", 4), ("b", 4)]
    assert m["samples"] == [0.0, 1.0, 2.0, 3.0]
    assert m["seconds"] == {"a": [0.04] * 3, "b": [0.04] * 3}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("tiny"), tiny_chat(), seed=5, with_vision=False, tokenizer=True)


def _decodes(engine: str, path: Path):
    d = Decoder(engine, path, 2, 8)
    try:
        times = [d.decode(3), d.decode(5)]
    finally:
        d.close()
    assert all(t > 0 for t in times)
    assert d.proc.wait(timeout=30) == 0


def test_k3_child_decodes_in_turns(tiny):
    _decodes("k3", tiny)


def test_a_child_that_cannot_start_says_why(tmp_path):
    with pytest.raises(RuntimeError, match=r"k3 decoder failed \(it exited with code 1\)"):
        Decoder("k3", tmp_path / "missing", 2, 8)
    with pytest.raises(RuntimeError, match="unknown engine"):
        Decoder("vllm", tmp_path, 2, 8)


def test_a_child_that_hangs_is_stopped_with_the_reason(tiny, monkeypatch):
    import interleaved

    d = Decoder("k3", tiny, 2, 1000)
    monkeypatch.setattr(interleaved, "TURN_S", 0.2)
    with pytest.raises(RuntimeError, match=r"k3 decoder failed \(no result line within 0.2 s\)"):
        d.decode(1000)   # far longer than 0.2 s on a tiny model too
    assert d.proc.poll() is not None, "the child was stopped"


@pytest.mark.skipif(not is_built(), reason=f"llama.cpp is not built in {cache_dir()}: `make llama-cpp`")
def test_llama_cpp_child_decodes_in_turns(tiny):
    _decodes("llama.cpp", convert(tiny, tiny / "bf16.gguf", "bf16"))


@pytest.mark.parametrize("flag", [["--interleave-rounds", "-1"], ["--interleave-tokens", "0"]])
def test_compare_rejects_impossible_turns_before_any_work(flag):
    import subprocess

    compare = Path(__file__).resolve().parents[2] / "benchmarks" / "compare.py"
    out = subprocess.run([sys.executable, str(compare), *flag], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "--interleave-rounds must be >= 0" in out.stderr and "Traceback" not in out.stderr
