"""The vision tower at K3's real dimensions (27 blocks, width 1024, 12 heads of 128, random bf16 weights kept as
stored, fp32 compute: the CPU default), side by side in one run:

  tower:  seconds per image at 448x448, 896x896 and 1344x1344 (the tower and projector; preprocessing apart),
          its FLOPs counted and its time over the floor (FLOPs / the machine's measured torch.mm rate, in fp32
          as the tower computes, and in the fastest precision the CPU has), and the same with
          --vision-dtype bfloat16 (bf16 products and attention through PyTorch's GEMMs) beside it,
          split into patch embedding, q/k/v and output projections, attention itself (2-D rotary and the
          softmax over the image), the MLP and the projector; and the process's peak RSS after each size
          (sizes run smallest first, so each new peak is that size's);
  ttft:   time to first token for the same chat prompt with one 448x448 image and without it, on a small
          text model in K3's layout (the `prose` shape) with the real tower in front of it.

    .venv/bin/python benchmarks/vision.py [--sizes 448,896,1344] [--runs 1]

Prints a table, then one JSON line (date, commit, command, CPU).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from k3.config.presets import prose
from k3.config.vision import VisionConfig
from k3.layers.vision import Projector, VisionTower, merge_2x2
from k3.media import prepare_image


def random_tower(v: VisionConfig, seed: int = 0) -> tuple[VisionTower, Projector]:
    """The tower and projector with bf16 weights scaled by 1/sqrt(fan-in), norms near 1 (as a checkpoint has them)."""
    g = torch.Generator().manual_seed(seed)
    tower, projector = VisionTower(v), Projector(v)
    for module in (tower, projector):
        for name, p in module.named_parameters():
            if p.dim() == 1:
                data = 1 + 0.1 * torch.randn(p.shape, generator=g)
            else:
                fan_in = p[0].numel() if p.dim() == 4 else p.shape[-1]
                data = torch.randn(p.shape, generator=g) * fan_in ** -0.5
            p.data = data.to(torch.bfloat16)
    return tower.eval(), projector.eval()


def noise_image(size: int, seed: int) -> bytes:
    from PIL import Image

    img = Image.frombytes("RGB", (size, size), random.Random(seed).randbytes(size * size * 3))
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


class Timers:
    """Seconds spent inside chosen modules, by part, from forward pre/post hooks."""

    def __init__(self, tower: VisionTower, projector: Projector):
        self.seconds: dict[str, float] = {}
        self._start: dict[int, float] = {}
        self._hook(tower.patch_embed, "patch embedding")
        for block in tower.encoder.blocks:
            self._hook(block, "block")
            for part, module in (("q/k/v, output projections", block.wqkv), ("q/k/v, output projections", block.wo),
                                 ("MLP", block.mlp), ("norms", block.norm0), ("norms", block.norm1)):
                self._hook(module, part)
        self._hook(projector, "projector")

    def _hook(self, module, part: str) -> None:
        def pre(m, args):
            self._start[id(m)] = time.perf_counter()

        def post(m, args, out):
            self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - self._start.pop(id(m))
        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)

    def parts(self) -> dict[str, float]:
        s = dict(self.seconds)
        inner = sum(s.get(k, 0.0) for k in ("q/k/v, output projections", "MLP", "norms"))
        s["attention (rotary, softmax over the image)"] = s.pop("block", 0.0) - inner
        return s


def precision(bf16: bool):
    """The tower's compute as K3Model.encode_images runs it: exact fp32, or (vision_dtype=bfloat16) bf16
    products and attention through PyTorch's own GEMMs."""
    import contextlib

    from k3.ops.dispatch import reference_only

    if not bf16:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(reference_only())
    stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
    return stack


def tower_run(tower, projector, v: VisionConfig, size: int, runs: int, bf16: bool = False) -> dict:
    image = prepare_image(noise_image(size, size))
    _, h, w = image.grid
    best, parts = float("inf"), {}
    for _ in range(runs):
        timers = Timers(tower, projector)
        start = time.perf_counter()
        with torch.inference_mode(), precision(bf16):
            y = tower(image.pixel_values, [image.grid])
            rows = projector(merge_2x2(y, 1, h, w))
        took = time.perf_counter() - start
        if took < best:
            best, parts = took, timers.parts()
        for m in [tower, projector, *tower.modules()]:
            m._forward_hooks.clear()
            m._forward_pre_hooks.clear()
    assert rows.shape == (image.num_tokens, v.text_hidden_size) and torch.isfinite(rows).all()
    return {"size": size, "patches": h * w, "image_tokens": image.num_tokens, "seconds": best,
            "parts": {k: round(x, 4) for k, x in sorted(parts.items(), key=lambda kv: -kv[1])},
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9}


def flops(v: VisionConfig, patches: int) -> dict:
    """Multiply-adds x 2 of one image through the tower and projector: the products (q, k, v and output
    projections, the MLP, the projector) and attention's two L x L products per layer."""
    D, Q, F, L = v.hidden_size, v.qkv_size, v.intermediate_size, patches
    linear = v.num_layers * L * (2 * D * 3 * Q + 2 * Q * D + 2 * 2 * D * F)
    merged = v.merged_width
    projector = (L // 4) * (2 * merged * merged + 2 * merged * v.text_hidden_size)
    attention = v.num_layers * 4 * L * L * Q
    return {"linear": linear + projector, "attention": attention, "total": linear + projector + attention}


def gemm_rate(dtype: torch.dtype, m: int = 4096, k: int = 1024, n: int = 4096, runs: int = 5) -> float:
    """FLOP/s of torch.mm at the tower's MLP shape ([patches, D] x [D, F]) in `dtype`: the machine's measured
    product rate, the floor's unit."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.mm(a, b)
    start = time.perf_counter()
    for _ in range(runs):
        torch.mm(a, b)
    return 2 * m * k * n * runs / (time.perf_counter() - start)


def with_floor(results: list[dict], v: VisionConfig) -> dict:
    """Each size's FLOPs and time over the floor: FLOPs / the fp32 product rate (the tower computes in fp32),
    and over the fastest rate the CPU has (bf16, where it has AVX512_BF16 or AMX)."""
    rates = {"fp32": gemm_rate(torch.float32), "bf16": gemm_rate(torch.bfloat16)}
    for r in results:
        f = flops(v, r["patches"])
        r["gflop"] = round(f["total"] / 1e9, 1)
        r["attention_share_of_flops"] = round(f["attention"] / f["total"], 3)
        r["floor_fp32_s"] = round(f["total"] / rates["fp32"], 3)
        r["over_floor_fp32"] = round(r["seconds"] / r["floor_fp32_s"], 3)
        r["over_floor_best"] = round(r["seconds"] * max(rates.values()) / f["total"], 3)
    return {k: round(x / 1e9, 1) for k, x in rates.items()}


def ttft(size: int) -> dict:
    """A small text model in K3's layout with the real tower: first token with and without one image."""
    from k3 import LLM, SamplingParams
    from k3.testing import make_checkpoint

    text = prose(vocab_size=768, bos_token_id=512, eos_token_id=514, pad_token_id=767)
    config = text.replace(vision=VisionConfig(text_hidden_size=text.hidden_size, media_pad_id=512 + 21))
    with tempfile.TemporaryDirectory() as d:
        llm = LLM(make_checkpoint(Path(d) / "m", config, tokenizer=True), cache_memory="256MiB",
                  enable_prefix_caching=False)
        one = SamplingParams(max_tokens=1, temperature=0.0)
        words = {"type": "text", "text": "Describe the picture in one sentence, naming what stands out most."}
        picture = {"type": "image", "image": noise_image(size, 7)}
        timings = {}
        for name, content in (("text", [words]), ("image", [words, picture]), ("text ", [words]),
                              ("image ", [words, picture])):
            start = time.perf_counter()
            out = llm.chat([{"role": "user", "content": content}], one)[0]
            timings[name.strip()] = min(timings.get(name.strip(), 1e9), time.perf_counter() - start)
            timings[name.strip() + "_tokens"] = len(out.output.prompt_token_ids)
    return {"size": size, "ttft_text_s": timings["text"], "ttft_image_s": timings["image"],
            "prompt_tokens_text": timings["text_tokens"], "prompt_tokens_image": timings["image_tokens"],
            "image_over_text": timings["image"] / timings["text"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="448,896,1344")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(0)
    v = VisionConfig()
    tower, projector = random_tower(v)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    sizes = sorted(int(s) for s in args.sizes.split(","))
    results = [tower_run(tower, projector, v, s, args.runs) for s in sizes]
    fast = [tower_run(tower, projector, v, s, args.runs, bf16=True) for s in sizes]
    del tower, projector
    rates = with_floor(results, v)
    with_floor(fast, v)
    for r, b in zip(results, fast):
        r["bf16_seconds"], r["bf16_speedup"] = round(b["seconds"], 3), round(r["seconds"] / b["seconds"], 2)
        r["bf16_over_floor_best"] = b["over_floor_best"]
    first = ttft(min(sizes))
    print(f"{'image':>10} {'patches':>8} {'tokens':>7} {'tower s':>9} {'GFLOP':>8} {'/ fp32 floor':>12} "
          f"{'/ best floor':>12} {'peak RSS GB':>12}  largest part")
    for r in results:
        top, secs = next(iter(r["parts"].items()))
        print(f"{r['size']:>5}x{r['size']:<4} {r['patches']:>8,} {r['image_tokens']:>7,} {r['seconds']:>9.2f} "
              f"{r['gflop']:>8,.0f} {r['over_floor_fp32']:>12.2f} {r['over_floor_best']:>12.2f} "
              f"{r['peak_rss_gb']:>12.2f}  {top} ({secs / r['seconds']:.0%})")
    print(f"measured product rate (torch.mm, 4096x1024x4096): fp32 {rates['fp32']} GFLOP/s, bf16 {rates['bf16']} GFLOP/s")
    for r in results:
        print(f"{r['size']}x{r['size']} with --vision-dtype bfloat16: {r['bf16_seconds']:.2f} s ({r['bf16_speedup']:.2f}x "
              f"faster; {r['bf16_over_floor_best']:.2f}x the bf16 floor)")
    print(f"weights loaded: peak RSS {base_rss:.2f} GB")
    print(f"TTFT, prose-sized text model: {first['ttft_text_s'] * 1e3:.0f} ms without the image, "
          f"{first['ttft_image_s'] * 1e3:.0f} ms with one {first['size']}x{first['size']} image "
          f"({first['image_over_text']:.1f}x)")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"bench": "vision", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      "commit": commit, "command": " ".join(["benchmarks/vision.py", *sys.argv[1:]]),
                      "weights_rss_gb": base_rss, "gemm_gflops": rates, "tower": results, "ttft": first}))


if __name__ == "__main__":
    main()
