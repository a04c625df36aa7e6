"""Are the per-CPU defaults of the decode settings right on this machine? k3's batch-1 decode with its
defaults against each alternative, in turns (interleaved.py: each form loaded once in its own process, the
forms decoding 16 tokens each in turn, alternating order), on compare.py's checkpoint. The settings are
the ones whose default depends on the CPU (k3/ops/native/__init__.py):

  K3_DECODE_GEMV       how the decode GEMVs read a weight: by default the row-length split measured on
                       this CPU (k3/ops/native/tuning.py), against tiles and sequential for every weight
  K3_WEIGHT_PREFETCH   the cache hint of the weight streams' software prefetches: t0 or non-temporal

    .venv/bin/python benchmarks/decode_settings.py [--checkpoint compare|wide|small] [--rounds 24] [--tokens 16] [--threads 2]

--checkpoint wide decodes a checkpoint with K3's own row lengths instead (hidden 7168: 7-14 KB rows where
compare.py's are 2-11 KB, mostly 4 KB; 4 layers, 2.6 GB of trunk), where the GEMV forms rank otherwise.
--checkpoint small decodes engine.py's small checkpoint (hidden 1024: 2 KB rows, weights of a few MB).

A ratio above 1 (the default's rate over the alternative's) says the default is the faster choice here.
Every form computes the same bits (tests/ops). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from k3.config import env
from k3.config.model import LAYER_KDA, LAYER_MLA, MLP_DENSE, MLP_MOE
from k3.config.presets import mid
from k3.ops.native import decode_gemv, native, tuning, weight_prefetch
from k3.streaming.plan import expert_sizes, weight_bytes
from k3.testing import make_checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from compare import Bandwidth, config as compare_config  # noqa: E402
from interleaved import decode_in_turns, summarize_interleaved  # noqa: E402

SETTINGS = ("K3_DECODE_GEMV", "K3_WEIGHT_PREFETCH")


def defaults() -> dict[str, str]:
    """Each setting's default on this CPU, in words."""
    return {"K3_DECODE_GEMV": tuning.describe(decode_gemv()), "K3_WEIGHT_PREFETCH": weight_prefetch()}


def alternatives(var: str, default: str) -> list[str]:
    """The values the environment table accepts for `var` other than its default (the measured GEMV split
    is none of them: it runs against both)."""
    return [v for v in env.BY_NAME[var].choices if v != default]


def forms() -> dict[str, dict[str, str]]:
    """{"default": {}, "VAR=value": {VAR: value}} for each setting's every alternative, defaults read here."""
    out = {"default": {}}
    for var, value in defaults().items():
        for other in alternatives(var, value):
            out[f"{var}={other}"] = {var: other}
    return out


def wide_config():
    """K3's row lengths at a few GB: hidden 7168, KDA heads of 128 (48 of K3's 96), MLA and experts in
    K3's widths, 4 layers (3 KDA, 1 MLA; the first dense)."""
    v = 32000
    return mid(hidden_size=7168, vocab_size=v, num_hidden_layers=4, layer_types=(LAYER_KDA,) * 3 + (LAYER_MLA,),
               mlp_types=(MLP_DENSE,) + (MLP_MOE,) * 3, attn_res_block_size=2, intermediate_size=5632,
               kda_num_heads=48, kda_head_dim=128, num_attention_heads=16, q_lora_rank=1536, kv_lora_rank=512,
               qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, num_experts=16, num_experts_per_token=4,
               moe_intermediate_size=1024, routed_expert_hidden_size=3584, bos_token_id=v - 256,
               eos_token_id=v - 254, pad_token_id=v - 1)


def small_config():
    """engine.py's small checkpoint (hidden 1024: 2 KB rows, matrices of 1-6 MB), with a test tokenizer's specials."""
    v = 32000
    return mid(bos_token_id=v - 256, eos_token_id=v - 254, pad_token_id=v - 1)


CHECKPOINTS = {"compare": compare_config, "wide": wide_config, "small": small_config}


def measure(args, work: Path) -> dict:
    c = CHECKPOINTS[args.checkpoint]()
    path = make_checkpoint(work, c, num_shards=4, with_vision=False, tokenizer=True)
    trunk, _, experts = weight_bytes(c, None)
    active = trunk + expert_sizes(c, experts)[2]
    # main() refused a set variable, so each form runs with its settings exactly as named
    decoders = {name: ("k3", path, os.environ | settings) for name, settings in forms().items()}
    measured = decode_in_turns(decoders, args.threads, args.rounds, args.tokens, Bandwidth().sample)
    pairs = [("default", name) for name in decoders if name != "default"]
    return summarize_interleaved(measured, args.tokens, {name: active for name in decoders}, pairs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", choices=sorted(CHECKPOINTS), default="compare")
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if native() is None:
        sys.exit("decode_settings.py measures the native kernels' settings: the native kernels did not load")
    if any(env.read(var) for var in SETTINGS):
        sys.exit(f"decode_settings.py compares the defaults with their alternatives: unset {' and '.join(SETTINGS)}")
    with tempfile.TemporaryDirectory(prefix="k3-decode-settings-") as work:
        r = measure(args, Path(work))
    rows = [{"setting": var, "default": value, "other": other,
             "default_over_other": r[f"decode_ratio_default_over_{var}={other}"],
             "per_round": r[f"decode_ratio_default_over_{var}={other}_per_round"]}
            for var, value in defaults().items() for other in alternatives(var, value)]
    result = {"bench": "decode_settings", "checkpoint": args.checkpoint, "threads": args.threads, "rounds": args.rounds, "tokens": args.tokens,
              "decode_tok_s": r["decode_tok_s"], "settings": rows}
    print(f"{'setting':<20}{'default':>26}{'other':>12}{'default / other':>17}{'rounds faster':>15}")
    for x in rows:
        won = sum(p > 1 for p in x["per_round"])
        print(f"{x['setting']:<20}{x['default']:>26}{x['other']:>12}{x['default_over_other']:>16.2f}x"
              f"{won:>9} of {len(x['per_round'])}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
