"""What an int8 trunk would cost in accuracy, measured before any int8 kernel exists (issue 25).

Every trunk matrix that k3 streams (k3.offload.trunk: attention, MLA, shared-expert and latent
projections) is quantised to symmetric int8, with one scale per output row or per 32 inputs, and
dequantised exactly in fp32 (what an int8 kernel computes); the reference takes the same matrices
widened to fp32, so both runs use the same GEMMs and only the quantisation differs. The logits on held-out text (this
repository's README, never trained on; seeded random ids for a checkpoint without a tokenizer, such as
a real-dimension slice) are compared with the fp32 model's: relative L2 (the one tolerance helper),
top-1 agreement and the mean KL(fp32 || int8) per token.

    .venv/bin/python benchmarks/int8_trunk_quality.py [CHECKPOINT] [--tokens 1024]
    .venv/bin/python benchmarks/int8_trunk_quality.py slice/ --tokens 128   # k3 synth slice/ --preset k3 --layers 2

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import k3
from k3.chat.tokenizer import K3Tokenizer
from k3.defaults import default_model
from k3.offload.trunk import layer_stream_specs
from k3.testing.tolerance import rel_l2

README = Path(__file__).resolve().parents[1] / "README.md"


def quantise(w: torch.Tensor, group: int | None) -> torch.Tensor:
    """Symmetric int8 with a scale per row (group None) or per `group` inputs, dequantised in fp32."""
    rows, cols = w.shape
    if group and cols % group:
        group = None
    g = w.float().view(rows, -1, group or cols)
    scale = g.abs().amax(-1, keepdim=True).clamp_min(1e-30) / 127
    return (torch.round(g / scale).clamp(-127, 127) * scale).view(rows, cols)


def input_ids(checkpoint: Path, vocab: int, n: int) -> tuple[torch.Tensor, str]:
    """The README's first n tokens with the checkpoint's tokenizer; a checkpoint without one (a
    random-weight slice from `k3 synth`) gets n seeded random ids, as good an input as any for it."""
    if (checkpoint / "tiktoken.model").is_file():
        return torch.tensor([K3Tokenizer.load(checkpoint).encode(README.read_text())[:n]]), "README text"
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(0)), "random ids"


def compare(got: torch.Tensor, ref: torch.Tensor) -> dict:
    lp, lq = torch.log_softmax(ref, -1), torch.log_softmax(got, -1)
    return {"rel_l2": rel_l2(got, ref), "top1": float((got.argmax(-1) == ref.argmax(-1)).float().mean()),
            "kl_mean": float((lp.exp() * (lp - lq)).sum(-1).mean())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", nargs="?", default=str(default_model()))
    ap.add_argument("--tokens", type=int, default=1024)
    args = ap.parse_args()
    model = k3.load(args.checkpoint)   # weights as stored (bf16, mapped): room for fp32 copies of the trunk
    names = [s.name for specs in layer_stream_specs(model.config).values() for s in specs]
    ids, source = input_ids(Path(args.checkpoint), model.config.vocab_size, args.tokens)
    original = {n: model.get_parameter(n) for n in names}
    out = {"checkpoint": args.checkpoint, "input": source, "tokens": ids.shape[1], "matrices": len(names),
           "params": sum(w.numel() for w in original.values())}
    logits = {}
    for label, change in (("fp32", lambda w: w.float()), ("per-row", lambda w: quantise(w, None)),
                          ("per-32", lambda w: quantise(w, 32))):
        for n, w in original.items():   # every matrix fp32, so all three runs take the same fp32 GEMMs
            module, _, leaf = n.rpartition(".")
            model.get_submodule(module)._parameters[leaf] = torch.nn.Parameter(change(w), requires_grad=False)
        with torch.inference_mode():
            logits[label] = model(ids).float()[0]
        if label != "fp32":
            out[label] = compare(logits.pop(label), logits["fp32"])
    print(f"{'scales':<10}{'rel L2':>12}{'top-1':>10}{'KL':>12}")
    for label in ("per-row", "per-32"):
        r = out[label]
        print(f"{label:<10}{r['rel_l2']:>12.3e}{r['top1']:>10.4f}{r['kl_mean']:>12.3e}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
