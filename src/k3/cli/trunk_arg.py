"""`--trunk int8`, shared by the commands that load a model (k3 generate, serve, bench --model, eval) and k3 plan."""

from __future__ import annotations


def add_trunk_argument(p) -> None:
    p.add_argument("--trunk", choices=["int8"], default=None,
                   help="int8: quantise the trunk's projection matrices as they load (per-32 scales; half the "
                        "memory and bytes per token; error: docs/guide/memory.md). A checkpoint from "
                        "`k3 quantize --trunk int8` is int8 without it")
