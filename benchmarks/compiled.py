"""torch.compile of the bare model against the eager model, batch-1 greedy decode on compare.py's checkpoint
(or CKPT), side by side in one run:

  eager       the model as it decodes: the whole decode plan in one native call a token
  op by op    the same model with the native plan off: each layer's modules call the kernels one at a time
              through the registry (what a compiled model runs, without the compiler)
  compiled    torch.compile(model) (inductor by default): the plan stands aside while compiling, so the
              graph holds every kernel as its torch operator (docs/design/kernels.md)

Each round decodes `--tokens` tokens with each form in turn from the same prompt; a form's rate is the best
of its rounds, and every form's tokens must equal eager's (the compiled logits are eager's bit for bit).

    .venv/bin/python benchmarks/compiled.py [CKPT] [--tokens 24] [--rounds 3] [--backend inductor]

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import k3
from k3.testing import make_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from compare import config as compare_config  # noqa: E402
from decode_profile import native_plan_off  # noqa: E402
from scratch import scratch_dir  # noqa: E402


def decode(forward, model, tokens: int) -> tuple[float, list[int]]:
    """(seconds a token, the greedy tokens) over `tokens` steps after a 64-token prompt and 3 warm-up steps."""
    state = model.new_state(1)
    ids = torch.arange(64).view(1, 64) * 7919 % model.config.vocab_size
    out = [int(forward(ids, state)[0, -1].argmax())]
    for _ in range(3):
        out.append(int(forward(torch.tensor([[out[-1]]]), state)[0, -1].argmax()))
    start = time.perf_counter()
    for _ in range(tokens):
        out.append(int(forward(torch.tensor([[out[-1]]]), state)[0, -1].argmax()))
    return (time.perf_counter() - start) / tokens, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt", nargs="?", help="a checkpoint directory (default: compare.py's, generated)")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", default="inductor", help="torch.compile's backend")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = args.ckpt or make_checkpoint(scratch_dir("k3-compiled-"), compare_config(), num_shards=4,
                                        with_vision=False)
    with torch.inference_mode():
        model = k3.load(path)
        compiled = torch.compile(model, backend=args.backend)
        start = time.perf_counter()
        decode(compiled, model, 1)   # the compiles happen here
        compile_s = time.perf_counter() - start
        seconds = {"eager": [], "op by op": [], "compiled": []}
        for _ in range(args.rounds):
            eager_s, reference = decode(model, model, args.tokens)
            compiled_s, tokens = decode(compiled, model, args.tokens)
            plan_on = native_plan_off()
            try:
                op_s, op_tokens = decode(model, model, args.tokens)
            finally:
                plan_on()
            if tokens != reference or op_tokens != reference:
                raise SystemExit("a form decoded other tokens than eager: its logits differ")
            for name, s in (("eager", eager_s), ("op by op", op_s), ("compiled", compiled_s)):
                seconds[name].append(s)
    report({name: min(s) for name, s in seconds.items()}, seconds, compile_s, args)


def report(best: dict, runs: dict, compile_s: float, args) -> None:
    print(f"{'form':<12}{'tok/s':>8}{'vs eager':>10}")
    for name, s in best.items():
        print(f"{name:<12}{1 / s:8.1f}{best['eager'] / s:10.2f}")
    print(f"first compiled prompt and token (the compiles): {compile_s:.1f} s")
    print(json.dumps({"bench": "compiled", "backend": args.backend, "threads": args.threads, "tokens": args.tokens,
                      "tok_s": {name: 1 / s for name, s in best.items()},
                      "compiled_over_eager": best["eager"] / best["compiled"],
                      "op_by_op_over_eager": best["eager"] / best["op by op"], "compile_s": compile_s,
                      "runs_s": runs}))


if __name__ == "__main__":
    main()
