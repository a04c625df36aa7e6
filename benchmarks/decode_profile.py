"""Where a batch-1 decode token goes, on compare.py's checkpoint (or CKPT): each native kernel's share,
the interpreter's, and the bandwidth floor, measured in one process.

  whole path   the model as it decodes (the whole decode plan in one native call): token time, time
               inside native calls, and what is left (Python and ATen between them)
  inside       the same tokens' plan split by the kernels' own part timers (set_part_timing):
               GEMVs, routed experts, KDA recurrence, MLA attention, row kernels, and the glue left
  per kernel   the same tokens with the native plan off, so the modules call each kernel
               through the dispatch one at a time: each kernel's ms per token (the kernels are the
               ones the whole path runs, in the same order; their glue is slower here and not shown)

    .venv/bin/python benchmarks/decode_profile.py [CKPT] [--tokens 30] [--threads 2]

Native calls are timed by wrapping the kernel module (about a microsecond a call). Prints three tables,
then one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import torch

import k3
import k3.ops.native as native_module
from k3.streaming.plan import expert_sizes, weight_bytes
from k3.testing import make_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from compare import bandwidth, config as compare_config  # noqa: E402
from scratch import scratch_dir  # noqa: E402

class TimedKernels:
    """The native module with every function call timed into `seconds` / `calls` (by name)."""

    def __init__(self, real):
        self._real, self.seconds, self.calls = real, collections.defaultdict(float), collections.Counter()

    def __getattr__(self, name):
        fn = getattr(self._real, name)
        if not callable(fn):
            return fn

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - t
                self.calls[name] += 1

        setattr(self, name, timed)
        return timed


def install(timer: TimedKernels) -> None:
    """Route every `native()` lookup in k3 to `timer`."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("k3.") and getattr(module, "native", None) is native_module.native:
            module.native = lambda: timer


STEP_OPS = (("k3.layers.kda", "kda_layer_step"), ("k3.layers.mla", "mla_layer_step"),
            ("k3.layers.moe", "moe_layer_step"), ("k3.layers.mlp", "mlp_layer_step"))


def native_plan_off():
    """The plan op by op through the modules and the registry (model/plan.py's run_steps; no sublayer's
    registered step takes a row, so each kernel is timed on its own). Returns a function that turns the
    native plan back on."""
    import dataclasses
    import importlib

    import k3.model.k3 as k3_model

    saved = [(k3_model, "decode_in_one_call", k3_model.decode_in_one_call)]
    k3_model.decode_in_one_call = lambda *args: None
    for module_name, name in STEP_OPS:
        module = importlib.import_module(module_name)
        op = getattr(module, name)
        saved.append((module, name, op))
        setattr(module, name, dataclasses.replace(op, supports=lambda *args: False))

    def restore() -> None:
        for module, name, value in saved:
            setattr(module, name, value)

    return restore


def decode(model, tokens: int, timer: TimedKernels) -> float:
    """Seconds per token over `tokens` greedy steps after a 64-token prompt and 3 warm-up steps."""
    state = model.new_state(1)
    ids = torch.arange(64).view(1, 64) * 7919 % model.config.vocab_size
    tok = int(model(ids, state, logits_to_keep=1)[0, -1].argmax())
    for _ in range(3):
        tok = int(model(torch.tensor([[tok]]), state)[0, -1].argmax())
    timer.seconds.clear()
    timer.calls.clear()
    native_module.native().set_part_timing(native_module.native().set_part_timing(False))  # zero the totals
    t = time.perf_counter()
    for _ in range(tokens):
        tok = int(model(torch.tensor([[tok]]), state)[0, -1].argmax())
    return (time.perf_counter() - t) / tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt", nargs="?", help="a checkpoint directory (default: compare.py's, generated)")
    ap.add_argument("--tokens", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    profile(args, args.ckpt or make_checkpoint(scratch_dir("k3-profile-"), compare_config(), num_shards=4,
                                               with_vision=False))


def profile(args, path) -> None:
    timer = TimedKernels(native_module.native())
    install(timer)
    inference = torch.inference_mode()  # held: as k3's engine runs the model (its guard ends with the object)
    inference.__enter__()
    model = k3.load(path)
    trunk, _, experts = weight_bytes(model.config, None)
    floor = (trunk + expert_sizes(model.config, experts)[2]) / bandwidth()
    n = args.tokens
    real = native_module.native()
    real.set_part_timing(True)   # turned on (and zeroed) here; decode() zeroes it again after warm-up
    token = decode(model, n, timer)
    whole = {k: v / n for k, v in timer.seconds.items()}
    inside = {k: v / n for k, v in real.part_seconds().items()}
    real.set_part_timing(False)
    native_plan_off()
    decode(model, n, timer)
    parts = {k: (v / n, timer.calls[k] / n) for k, v in sorted(timer.seconds.items(), key=lambda kv: -kv[1])}
    report(token, whole, inside, parts, floor)


def report(token: float, whole: dict, inside_call: dict, parts: dict, floor: float) -> None:
    inside = sum(whole.values())
    print(f"whole path: {token * 1e3:.2f} ms a token = native {inside * 1e3:.2f} + other {(token - inside) * 1e3:.2f}; "
          f"floor {floor * 1e3:.2f} ms ({token / floor:.2f}x)")
    for name, s in sorted(whole.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<24}{s * 1e3:8.3f} ms")
    call = inside_call.pop("decode_plan", 0.0)
    if call:
        print(f"inside decode_plan ({call * 1e3:.3f} ms, wall time on the calling thread):")
        for name, s in sorted(inside_call.items(), key=lambda kv: -kv[1]):
            print(f"  {name:<24}{s * 1e3:8.3f} ms")
        print(f"  {'rest (glue, copies)':<24}{(call - sum(inside_call.values())) * 1e3:8.3f} ms")
    print("per kernel (native plan off):")
    for name, (s, calls) in parts.items():
        print(f"  {name:<24}{s * 1e3:8.3f} ms  {calls:5.1f} calls")
    print(json.dumps({"token_s": token, "native_s": inside, "other_s": token - inside, "floor_s": floor,
                      "over_floor": token / floor, "whole_path_s": whole,
                      "inside_decode_plan_s": {"decode_plan": call, **inside_call},
                      "per_kernel_s": {k: v[0] for k, v in parts.items()},
                      "per_kernel_calls": {k: v[1] for k, v in parts.items()}}))


if __name__ == "__main__":
    main()
