"""Batch-1 decode of several engines taking turns at the same moments, for compare.py.

This VM's memory bandwidth moves between phases (about 40 to 80 GB/s) that last seconds to minutes, so
two engines timed in separate runs, even alternating, often decode in different phases: across five
runs of compare.py on one code base the ratio of their medians went from 1.03x to 1.45x. Here every
engine is loaded once into its own process (decode_child.py), and the engines decode `tokens` tokens
each in turn, `rounds` times (the order alternating each round), with the bandwidth sampled before and
after every round. Each engine's rate is its tokens over its seconds across all rounds, so both rates
average over the same phases.

    from interleaved import decode_in_turns, summarize_interleaved
"""

from __future__ import annotations

import json
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = Path(__file__).with_name("decode_child.py")
PAUSE_S = 0.05   # between turns: the last engine's idle threads stop spinning before the next one starts
START_S, TURN_S = 900.0, 300.0   # at most, for a child to load (it may build k3's kernels) and for a turn


class Decoder:
    """One engine's decode_child.py process: started and warmed up on construction, decode(n) -> seconds.
    tokens: how many it will decode in all (llama.cpp sizes its context to it)."""

    def __init__(self, engine: str, path: Path, threads: int, tokens: int, env: dict | None = None):
        self.engine = engine
        self.log = tempfile.TemporaryFile(mode="w+")   # the child's stderr, shown if it fails
        self.proc = subprocess.Popen([sys.executable, str(CHILD), engine, str(path), str(threads), str(tokens)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self._expect("ready", START_S)

    def _expect(self, what: str, timeout: float) -> str:
        """The child's next line; a clear error with its stderr when it ends, hangs or says otherwise."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line or (what == "ready" and line.strip() != "ready"):
            if not ready:
                why = f"no {what} line within {timeout:g} s"
            elif not line:
                why = f"it exited with code {self.proc.wait(timeout=30)}"
            else:
                why = f"expected {what}, got {line.strip()[:200]!r}"
            self.proc.kill()
            self.proc.wait()
            self.log.seek(0)
            raise RuntimeError(f"{self.engine} decoder failed ({why}):\n{self.log.read()[-3000:]}")
        return line

    def decode(self, tokens: int) -> float:
        self.proc.stdin.write(f"{tokens}\n")
        self.proc.stdin.flush()
        return json.loads(self._expect("result", TURN_S))["seconds"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()


def interleave(decoders: dict[str, Decoder], rounds: int, tokens: int, sample) -> dict:
    """{"seconds": {engine: [s per round]}, "samples": [bytes/s before round 0, after each round]}.
    sample() -> bytes/s, the bandwidth probe."""
    seconds = {name: [] for name in decoders}
    samples = [sample()]
    for r in range(rounds):
        order = list(decoders) if r % 2 == 0 else list(reversed(decoders))
        for name in order:
            time.sleep(PAUSE_S)
            seconds[name].append(decoders[name].decode(tokens))
        samples.append(sample())
    return {"seconds": seconds, "samples": samples}


def decode_in_turns(decoders: dict, threads: int, rounds: int, tokens: int, sample) -> dict:
    """Start each decoder process, one after another, then decode in turns (interleave); every process is
    closed however it ends. decoders: {name: (child engine, path, env or None for this process's own)}."""
    started = {}
    try:
        for name, (engine, path, env) in decoders.items():
            started[name] = Decoder(engine, path, threads, rounds * tokens, env)
        return interleave(started, rounds, tokens, sample)
    finally:
        for d in started.values():
            d.close()


def summarize_interleaved(measured: dict, tokens: int, active: dict, pairs) -> dict:
    """Rates over all rounds, each engine's decode/floor (each round against the higher of the samples
    around it; median over rounds), and per pair (ours, other) the ratio of rates, the per-round ratios,
    and the ratio of rates over the slower and the faster half of the rounds (by that bandwidth: the
    lead depends on the memory phase). active: bytes a decode token reads, per engine."""
    seconds, samples = measured["seconds"], measured["samples"]
    bandwidth = [max(a, b) for a, b in zip(samples, samples[1:])]   # per round
    floors = {k: [a / bw for bw in bandwidth] for k, a in active.items()}   # seconds a token, per round
    by_bandwidth = sorted(range(len(bandwidth)), key=lambda r: bandwidth[r])
    halves = [by_bandwidth[:len(by_bandwidth) // 2], by_bandwidth[len(by_bandwidth) // 2:]]
    result = {"tokens_per_round": tokens, "rounds": len(bandwidth), "bandwidth_samples": samples,
              "decode_tok_s": {k: tokens * len(v) / sum(v) for k, v in seconds.items()},
              "decode_over_floor": {k: statistics.median(s / tokens / f for s, f in zip(v, floors[k]))
                                    for k, v in seconds.items()},
              "seconds": seconds}
    for ours, other in pairs:
        result[f"decode_ratio_{ours}_over_{other}"] = result["decode_tok_s"][ours] / result["decode_tok_s"][other]
        result[f"decode_ratio_{ours}_over_{other}_per_round"] = [b / a for a, b in zip(seconds[ours], seconds[other])]
        result[f"decode_ratio_{ours}_over_{other}_by_bandwidth"] = [
            {"bandwidth_bytes_s": statistics.median(bandwidth[r] for r in half),
             "ratio": sum(seconds[other][r] for r in half) / sum(seconds[ours][r] for r in half)}
            for half in halves if half]
    return result


def show_interleaved(result: dict, pairs) -> None:
    print(f"decode, interleaved ({result['rounds']} rounds of {result['tokens_per_round']} tokens each, "
          f"the engines taking turns):")
    for name, rate in result["decode_tok_s"].items():
        print(f"  {name:<15}{rate:>8.1f} tok/s   decode/floor {result['decode_over_floor'][name]:.2f}x")
    for ours, other in pairs:
        per_round = result[f"decode_ratio_{ours}_over_{other}_per_round"]
        halves = "; ".join(f"{h['ratio']:.2f}x at {h['bandwidth_bytes_s'] / 1e9:.0f} GB/s"
                           for h in result[f"decode_ratio_{ours}_over_{other}_by_bandwidth"])
        print(f"  {ours}/{other}: {result[f'decode_ratio_{ours}_over_{other}']:.2f}x (rounds {min(per_round):.2f}-"
              f"{max(per_round):.2f}, median {statistics.median(per_round):.2f}; slower and faster half of the "
              f"rounds: {halves})")
