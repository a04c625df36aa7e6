"""k3 against llama.cpp and mlx-lm (CPU), side by side on one random checkpoint in the official layout
with K3's proportions scaled down (hidden 2048, 8 layers with the 3:1 KDA:MLA pattern, 64 experts
top-8, latent 1024, MXFP4 experts), alternating the engines round by round in fresh processes:

  decode tokens/s at batch 1 (after a 64-token prompt), prefill tokens/s at 512 tokens, peak RSS,
  and each engine's decode time against the memory-bandwidth floor (active bytes per token /
  read bandwidth measured here: a pure read by both threads and a GEMV over 1 GiB, the faster of the two,
  sampled before and after every run, each run set against the higher of its two samples; also the median run against the fastest sample of the whole run), and the
  decode ratio between engines three ways: of the medians, per round, and at equal bandwidth (the
  ratio of the engines' decode/floor, which divides out the memory phases their runs fell in).

Then decode with the engines taking turns (interleaved.py; k3, k3-int8 and llama.cpp, each loaded once
in its own process, 16 tokens a turn for 32 rounds): both rates over the same moments, so the memory
phases that made separate runs' ratio swing (1.03-1.45x across five runs of one code base) fall on
both engines alike. That ratio is the decode headline; llama-bench's own numbers stay beside it.

    .venv/bin/python benchmarks/compare.py [--rounds 7] [--decode-tokens 128] [--threads 2] [--no-mlx] [--mlx-rounds 1]
                                           [--k3-int8] [--interleave-rounds 32] [--interleave-tokens 16]

Each engine runs in its best CPU configuration with the checkpoint's bf16 trunk and MXFP4 experts:
k3 computes in fp32 (dtype=None); llama.cpp is built on first use from PyPI's llama-cpp-python
source (`make llama-cpp`), the checkpoint converted by its own converter (experts kept MXFP4, trunk
BF16) and timed by `llama-bench` with the same thread count (in turns: its C API through the
bindings vendored with that source, with llama-bench's context parameters and one llama_decode a
token); mlx-lm computes in fp32 (measured several times faster than its bf16 on a CPU without bf16
arithmetic; on an AVX-512 BF16 Xeon the two were close). Prints a table of medians over the rounds, then one JSON line.

Under K3_NATIVE_SIMD=avx2 both k3 and llama.cpp run AVX2 code (llama.cpp from a second, AVX2-only build:
k3/testing/llama_cpp/build.py): an AVX2-only CPU's code paths, side by side on a newer one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from k3.config.presets import mid
from k3.streaming.plan import expert_sizes, weight_bytes
from k3.testing import make_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from interleaved import decode_in_turns, show_interleaved, summarize_interleaved  # noqa: E402

CHILD = r'''
import json, os, sys, time
import numpy as np
engine, path, n_decode, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
engine, _, trunk = engine.partition(":")   # k3:int8 -> k3 with its int8 trunk
prompt = (np.arange(512) * 7919 % 30000).reshape(1, 512)
def rss():
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
if engine == "k3":
    import torch, k3
    inference = torch.inference_mode()  # as k3's engine runs the model; held, or its guard ends at once
    inference.__enter__()
    torch.set_num_threads(threads)
    model = k3.load(path, trunk=trunk or None)
    def prefill(ids):  # the last position's logits only, as the engine and llama-bench compute
        state = model.new_state(1)
        return model(torch.tensor(ids), state, logits_to_keep=1), state
    def step(tok, state):
        return model(torch.tensor([[tok]]), state)
    def top(logits):
        return int(logits[0, -1].argmax())
else:
    import mlx.core as mx
    from mlx_lm.utils import load_model
    model, _ = load_model(__import__("pathlib").Path(path))
    model.set_dtype(mx.float32)
    def prefill(ids):
        cache = model.make_cache()
        out = model(mx.array(ids), cache=cache)
        mx.eval(out)
        return out, cache
    def step(tok, cache):
        out = model(mx.array([[tok]]), cache=cache)
        mx.eval(out)
        return out
    def top(logits):
        return int(mx.argmax(logits[0, -1]).item())
prefill(prompt)  # warm-up at full size, as llama-bench warms up before each test (its full pp prompt)
t0 = time.perf_counter(); prefill(prompt); prefill_s = time.perf_counter() - t0
logits, state = prefill(prompt[:, :64])
tok = top(logits)
for _ in range(3):
    tok = top(step(tok, state))
t0 = time.perf_counter()
for _ in range(n_decode):
    tok = top(step(tok, state))
decode_s = time.perf_counter() - t0
print(json.dumps({"decode_tok_s": n_decode / decode_s, "prefill_tok_s": 512 / prefill_s, "peak_rss": rss()}))
'''


def config():
    # Specials as K3 lays them out (bos/eos/pad = first, third and last of the 256 after the ranks),
    # inside this vocabulary, so the test tokenizer pairs with it and llama.cpp accepts the ids.
    v = 32000
    return mid(hidden_size=2048, vocab_size=v, intermediate_size=5632, kda_num_heads=16, kda_head_dim=128,
               num_attention_heads=16, q_lora_rank=768, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
               v_head_dim=128, num_experts=64, num_experts_per_token=8, moe_intermediate_size=1024,
               routed_expert_hidden_size=1024, bos_token_id=v - 256, eos_token_id=v - 254, pad_token_id=v - 1)


class Bandwidth:
    """Read-bandwidth probe over one 1 GiB buffer, built once so a sample takes a fraction of a second. Two
    kinds, each the best of `repeat`: "read", every byte read once by both threads with the widest loads
    and nothing else (k3's native read_sum, on 2 MB pages where the system has them: the machine's peak
    as the threads see it), and "gemv", the best of a numpy fp32 GEMV and k3's native bf16 GEMV over the
    same kind of buffer on 4 KB and 2 MB pages (a decode's own reads, multiply-adds included). A sample is
    the faster of the two: taking the fastest makes the floor stricter, never flattering; `by_kind` keeps
    every sample of each."""

    def __init__(self, nbytes: int = 1024 * 2 ** 20):
        import torch

        from k3.ops import huge_pages
        from k3.ops.native import native

        rng = np.random.default_rng(0)
        self.w = rng.random((nbytes // 4 // 4096, 4096), dtype=np.float32)
        self.x = rng.random(4096, dtype=np.float32)
        self.kernels = native()
        self.by_kind: dict[str, list[float]] = {"read": [], "gemv": []}
        if self.kernels is not None:
            self.wb = torch.from_numpy(self.w).reshape(-1, 8192).bfloat16()
            self.xb = torch.ones(1, 8192)
            self.wh = huge_pages.copy_of(self.wb) if huge_pages.available() else None
            self.raw = huge_pages.empty((nbytes,), torch.uint8).fill_(1)

    def sample(self, repeat: int = 3) -> float:
        """bytes/s: the faster of the read and GEMV probes (both kept in by_kind)."""
        rates = [self.w.nbytes / min(_timed(lambda: self.w @ self.x) for _ in range(repeat))]
        if self.kernels is not None:
            for w in (self.wb, self.wh) if self.wh is not None else (self.wb,):
                rates.append(w.numel() * 2 / min(_timed(lambda: self.kernels.bf16_linear(self.xb, w))
                                                 for _ in range(repeat)))
            self.by_kind["read"].append(self.raw.numel() / min(_timed(lambda: self.kernels.read_sum(self.raw))
                                                               for _ in range(repeat)))
        self.by_kind["gemv"].append(max(rates))
        return max(self.by_kind["gemv"][-1], *self.by_kind["read"][-1:])


def bandwidth(nbytes: int = 1024 * 2 ** 20) -> float:
    """Read bandwidth, bytes/s: one probe (see Bandwidth), best of 5."""
    return Bandwidth(nbytes).sample(repeat=5)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_python(engine: str, path: Path, decode_tokens: int, threads: int, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, engine, str(path), str(decode_tokens), str(threads)],
                         capture_output=True, text=True, timeout=1800, env=None if env is None else os.environ | env)
    if out.returncode != 0:
        raise RuntimeError(f"{engine} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_llama_cpp(gguf: Path, decode_tokens: int, threads: int, repack: bool = True) -> dict:
    """Two llama-bench processes: pp512, then tg after 64 tokens of context (as the Python children: decode
    last, next to the bandwidth sample taken after the run)."""
    from k3.testing.llama_cpp import bench

    pp = bench(gguf, threads=threads, prompt=512, repack=repack)
    tg = bench(gguf, threads=threads, generate=decode_tokens, depth=64, repack=repack)
    return {"decode_tok_s": tg["avg_ts"], "prefill_tok_s": pp["avg_ts"], "peak_rss": None,
            "build": tg.get("build_commit"), "cpu": tg.get("cpu_info"), "repack": repack}


def llama_cpp_repack(gguf: Path, threads: int) -> bool:
    """llama.cpp's best configuration that runs this GGUF: its default weight repacking, unless that aborts
    (its repacked Q8_0 for this model on an Intel CPU with AMX fails GGML_ASSERT(*cur_backend_id != -1) at
    prefill), then without it."""
    from k3.testing.llama_cpp import AnchorError, bench

    try:
        bench(gguf, threads=threads, prompt=64, repack=True)
        return True
    except AnchorError as e:
        if "cur_backend_id" not in str(e):
            raise
        print(f"llama.cpp aborts on {gguf.name} with its weights repacked; running it without repacking",
              file=sys.stderr, flush=True)
        return False


def prepare_llama_cpp(path: Path, trunk: str = "bf16") -> Path:
    """The checkpoint as a GGUF: its trunk as stored (bf16) or as Q8_0 (the quantised row); MXFP4 experts either way."""
    from k3.testing.llama_cpp import build, convert

    build(log=lambda s: print(s, file=sys.stderr, flush=True))
    return convert(path, path / f"llama-cpp-{trunk}-mxfp4.gguf", trunk)


def int8_trunk_bytes(c) -> int:
    """Trunk bytes (the embedding apart) with k3's int8 trunk: each quantised matrix as int8 codes and its
    per-32 bf16 scales (the bytes of llama.cpp's Q8_0 too: 34 per 32 weights), the rest as stored."""
    from k3.checkpoint.layout import expected_tensors, int8_pair, int8_target
    from k3.streaming.plan import EMBEDDING

    return sum(sum(p.nbytes for p in int8_pair(s)) if int8_target(s) else s.nbytes
               for s in expected_tensors(c) if s.expert is None and s.name != EMBEDDING)


def summarize(runs: dict, active: dict, samples: list[float]) -> dict:
    """Medians per engine, the ratios of medians, and two floor ratios: each run against the floor of the
    bandwidth sampled next to it (the higher of the samples just before and just after it; the median
    over runs is the headline), and the median run against the floor of the fastest sample of the whole
    run (the strictest: memory bandwidth here moves between phases of seconds, and no run sees only the
    fastest one)."""
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("decode_tok_s", "prefill_tok_s")}
           for k, v in runs.items()}
    for k, v in runs.items():
        rss = [r["peak_rss"] for r in v if r["peak_rss"]]
        med[k]["peak_rss"] = max(rss) if rss else None
    fastest = max(samples)
    floor_s = {k: a / fastest for k, a in active.items()}

    def over_paired(k: str, r: dict) -> float:
        return r["bandwidth_bytes_s"] / active[k] / r["decode_tok_s"]

    result = {"active_bytes_per_token": active, "bandwidth_bytes_s": fastest, "floor_s": floor_s, "median": med,
              "runs": runs, "bandwidth_samples": samples,
              "decode_over_floor": {k: statistics.median(over_paired(k, r) for r in v) for k, v in runs.items()},
              "decode_over_fastest_floor": {k: 1 / m["decode_tok_s"] / floor_s[k] for k, m in med.items()}}
    for ours, other in pairs(med):
        result[f"decode_ratio_{ours}_over_{other}"] = med[ours]["decode_tok_s"] / med[other]["decode_tok_s"]
        result[f"prefill_ratio_{ours}_over_{other}"] = med[ours]["prefill_tok_s"] / med[other]["prefill_tok_s"]
        rounds = zip(runs[ours], runs[other])   # the same rounds, in order
        result[f"decode_ratio_{ours}_over_{other}_per_round"] = [a["decode_tok_s"] / b["decode_tok_s"] for a, b in rounds]
        # each engine's decode/floor already divides out the bandwidth its runs met: their ratio compares
        # the engines at equal bandwidth, whichever phases their runs fell in
        result[f"decode_ratio_{ours}_over_{other}_at_equal_bandwidth"] = (result["decode_over_floor"][other]
                                                                          / result["decode_over_floor"][ours])
    return result


QUANTISED = ("k3-int8-trunk", "llama.cpp-q8_0")   # the like-for-like quantised row: int8 / Q8_0 trunks


def trunk_kind(engine: str) -> str:
    return "int8" if engine in QUANTISED else "bf16"


def pairs(engines) -> list[tuple[str, str]]:
    """(k3 form, other engine) for every k3 form and every other engine with the same kind of trunk: the bf16
    trunk (k3, k3-int8 against llama.cpp, mlx-lm) and the quantised one (k3-int8-trunk against llama.cpp-q8_0)."""
    ours = [k for k in engines if k.startswith("k3")]
    return [(a, b) for a in ours for b in engines if not b.startswith("k3") and trunk_kind(a) == trunk_kind(b)]


def show(result: dict) -> None:
    samples = result["bandwidth_samples"]
    kinds = "; ".join(f"{k} probe median {statistics.median(v) / 1e9:.1f} GB/s"
                      for k, v in result.get("bandwidth_by_probe", {}).items())
    active = ", ".join(f"{k} {a / 1e6:,.1f} MB" for k, a in sorted(set(result["active_bytes_per_token"].items())))
    floors = ", ".join(f"{k} {f * 1e3:.1f} ms" for k, f in result["floor_s"].items())
    print(f"active bytes/token: {active}; bandwidth samples "
          f"{min(samples) / 1e9:.1f}-{max(samples) / 1e9:.1f} GB/s (median {statistics.median(samples) / 1e9:.1f}; "
          f"{kinds}); floor at the fastest: {floors}")
    print(f"{'engine':<15}{'decode tok/s':>14}{'prefill tok/s':>15}{'decode/floor':>14}{'vs fastest':>12}"
          f"{'peak RSS MB':>13}")
    for name, m in result["median"].items():
        rss = f"{m['peak_rss'] / 1e6:>13.0f}" if m["peak_rss"] else f"{'-':>13}"
        print(f"{name:<15}{m['decode_tok_s']:>14.1f}{m['prefill_tok_s']:>15.1f}"
              f"{result['decode_over_floor'][name]:>13.2f}x{result['decode_over_fastest_floor'][name]:>11.2f}x{rss}")
    print("decode/floor: each run against the bandwidth sampled next to it (median over runs); vs fastest: the "
          "median decode against the fastest sample of the whole run")
    for ours, other in pairs(result["median"]):
        per_round = " ".join(f"{r:.2f}" for r in result[f"decode_ratio_{ours}_over_{other}_per_round"])
        print(f"{ours}/{other}: decode {result[f'decode_ratio_{ours}_over_{other}']:.2f}x (rounds: {per_round}; "
              f"at equal bandwidth {result[f'decode_ratio_{ours}_over_{other}_at_equal_bandwidth']:.2f}x), "
              f"prefill {result[f'prefill_ratio_{ours}_over_{other}']:.2f}x")
    if "interleaved" in result:
        show_interleaved(result["interleaved"], pairs(result["interleaved"]["decode_tok_s"]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    # 128 tokens: the VM's memory bandwidth moves between phases (about 45 and 65 GB/s) within seconds;
    # 32 tokens (0.6 s) left single rounds of either engine 30 % apart, 128 about 15 %.
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-mlx", action="store_true", help="skip mlx-lm (k3 and llama.cpp only)")
    ap.add_argument("--mlx-rounds", type=int, default=1,
                    help="rounds that include mlx-lm (default 1: one run takes minutes on 2 cores)")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip llama.cpp (no build, no conversion)")
    ap.add_argument("--interleave-rounds", type=int, default=32,
                    help="rounds of decode with the engines taking turns in long-lived processes (0: none)")
    ap.add_argument("--interleave-tokens", type=int, default=16, help="tokens each engine decodes a turn")
    ap.add_argument("--k3-int8", action="store_true",
                    help="also run k3 with int8 activations for its MXFP4 products (K3_MXFP4_INT8=1: llama.cpp's "
                         "rounding, not k3's exact default) as its own engine, k3-int8")
    ap.add_argument("--quantised", action="store_true",
                    help="also the like-for-like quantised row: k3 with its int8 trunk (trunk='int8') against "
                         "llama.cpp with a Q8_0 trunk, MXFP4 experts in both (engines k3-int8-trunk, llama.cpp-q8_0)")
    args = ap.parse_args()
    if args.interleave_rounds < 0 or args.interleave_tokens < 1:
        ap.error("--interleave-rounds must be >= 0 (0: no decode in turns) and --interleave-tokens >= 1")
    # The checkpoint and its GGUF (about 3 GB) live only as long as the run.
    with tempfile.TemporaryDirectory(prefix="k3-compare-") as work:
        result = measure(args, Path(work))
    show(result)
    print(json.dumps(result))


def measure(args, work: Path) -> dict:
    c = config()
    path = make_checkpoint(work, c, num_shards=4, with_vision=False, tokenizer=True)
    trunk, _, experts = weight_bytes(c, None)
    routed = expert_sizes(c, experts)[2]
    active = {"bf16": trunk + routed, "int8": int8_trunk_bytes(c) + routed}   # per trunk kind
    int8 = {"K3_MXFP4_INT8": "1"}
    engines = {"k3": lambda: run_python("k3", path, args.decode_tokens, args.threads)}
    decoders = {"k3": ("k3", path, None)}   # the engines that decode in turns: (child engine, path, env)
    if args.k3_int8:
        engines["k3-int8"] = lambda: run_python("k3", path, args.decode_tokens, args.threads, int8)
        decoders["k3-int8"] = ("k3", path, int8)
    if args.quantised:
        engines["k3-int8-trunk"] = lambda: run_python("k3:int8", path, args.decode_tokens, args.threads)
        decoders["k3-int8-trunk"] = ("k3:int8", path, None)
    if not args.no_llama_cpp:
        gguf = prepare_llama_cpp(path)
        engines["llama.cpp"] = lambda: run_llama_cpp(gguf, args.decode_tokens, args.threads)
        decoders["llama.cpp"] = ("llama.cpp", gguf, None)
        if args.quantised:
            q8 = prepare_llama_cpp(path, "q8_0")
            repack = llama_cpp_repack(q8, args.threads)
            engines["llama.cpp-q8_0"] = lambda: run_llama_cpp(q8, args.decode_tokens, args.threads, repack)
            decoders["llama.cpp-q8_0"] = ("llama.cpp" if repack else "llama.cpp:no-repack", q8, None)
    if not args.no_mlx:
        engines["mlx-lm"] = lambda: run_python("mlx", path, args.decode_tokens, args.threads)
    probe = Bandwidth()
    runs, samples = separate_runs(engines, args, probe)
    result = summarize(runs, {k: active[trunk_kind(k)] for k in engines}, samples)
    if args.interleave_rounds and len(decoders) > 1:
        measured = decode_in_turns({name: (engine, path, None if env is None else os.environ | env)
                                    for name, (engine, path, env) in decoders.items()},
                                   args.threads, args.interleave_rounds, args.interleave_tokens, probe.sample)
        result["interleaved"] = summarize_interleaved(measured, args.interleave_tokens,
                                                      {k: active[trunk_kind(k)] for k in decoders}, pairs(decoders))
    result["bandwidth_by_probe"] = {k: v for k, v in probe.by_kind.items() if v}
    return result


def separate_runs(engines: dict, args, probe: Bandwidth) -> tuple[dict, list[float]]:
    """Every engine in fresh processes, round by round: (runs per engine, bandwidth samples)."""
    samples, runs = [], {k: [] for k in engines}
    for r in range(args.rounds):
        # Alternate who goes first, so neither engine always follows the other; sample the bandwidth
        # before and after every run, so each run has a floor from its own moment.
        order = list(engines) if r % 2 == 0 else list(reversed(engines))
        for name in order:
            if name == "mlx-lm" and r >= args.mlx_rounds:
                continue
            if not samples:
                samples.append(probe.sample())
            before = samples[-1]
            run = engines[name]()
            samples.append(probe.sample())
            run["bandwidth_bytes_s"] = max(before, samples[-1])
            runs[name].append(run)
    return runs, samples


if __name__ == "__main__":
    main()
