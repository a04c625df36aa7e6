"""The engine's flags: k3.EngineConfig's fields under vLLM's flag names, one parser for every command that
runs a model here (k3 serve, generate, chat, bench --model, eval --model, check --model), and
`engine_config(args)`, the one place those flags become an EngineConfig (validated there, before loading)."""

from __future__ import annotations

import argparse
import re

from k3.cli.trunk_arg import add_trunk_argument


def add_engine_arguments(p, *, max_num_seqs: int = 8, cache_memory: str = "1GiB", local_only: bool = False) -> None:
    """The flags, in a group of their own; `local_only`: the command also drives remote endpoints, where
    they do not apply (the group's title says so)."""
    g = p.add_argument_group("engine (k3.EngineConfig" + ("; with --model, a model run here)" if local_only else ")"))
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="compute dtype (auto: fp32 on a CPU, weights kept as stored)")
    g.add_argument("--device", default="cpu", help="torch device for the model and its state (e.g. cuda)")
    g.add_argument("--max-num-seqs", type=int, default=max_num_seqs, help="sequences decoded together")
    g.add_argument("--max-num-batched-tokens", type=int, default=512,
                   help="tokens per engine step; longer prompts prefill in chunks")
    g.add_argument("--cache-memory", default=cache_memory, metavar="SIZE", help="KDA slots + the MLA latent cache")
    g.add_argument("--memory-budget", metavar="SIZE", help="weights + cache within this (e.g. 64GB); experts, then "
                   "layers, that do not fit stream from the shards (see k3 plan)")
    g.add_argument("--max-model-len", type=int, help="prompt + completion tokens per request (default: what the "
                   "cache holds for one sequence; k3 serve: at most 131,072)")
    g.add_argument("--block-size", type=int, default=16, help="tokens per MLA cache block")
    g.add_argument("--max-resident-seqs", type=int, help="sequences whose state stays in memory; the others' "
                   "waits on disk for their turn (default: as many as --cache-memory holds)")
    g.add_argument("--state-offload-dir", metavar="DIR", help="where waiting sequences' state goes "
                   "(default: a private temporary folder)")
    add_trunk_argument(g)
    g.add_argument("--no-vision", action="store_true",
                   help="load the text model alone (a checkpoint's vision tower is not read; images are refused)")
    g.add_argument("--vision-dtype", choices=("float32", "bfloat16"), default="float32",
                   help="the vision tower's compute: float32 (exact against the reference) or bfloat16 (faster where "
                        "the CPU has AMX or AVX512_BF16; about 1e-2 relative from float32)")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse the state of earlier prompts' prefixes (exact; on by default)")
    g.add_argument("--prefix-cache-memory", metavar="SIZE",
                   help="part of --cache-memory kept for KDA snapshots (default a quarter; 0 keeps none)")
    g.add_argument("--prefix-cache-spill-dir", metavar="DIR",
                   help="write snapshots evicted from memory here, to resume from later (off by default)")
    g.add_argument("--prefix-cache-spill-bytes", metavar="SIZE", default="16GiB",
                   help="disk the spilled snapshots may take (default 16GiB)")
    g.add_argument("--speculative-config", metavar="JSON",
                   help='speculative decoding, vLLM\'s JSON: {"method": "ngram", "num_speculative_tokens": 4, '
                        '"prompt_lookup_max": 4, "prompt_lookup_min": 2} or {"method": "draft_model", '
                        '"model": "PATH", "num_speculative_tokens": 4} (off by default)')


def engine_config(args, **fixed):
    """The EngineConfig the flags describe (ValueError naming the field where one is wrong); `fixed`: settings
    the command decides itself."""
    from k3.engine.config import EngineConfig

    settings = dict(dtype=args.dtype, device=args.device, max_num_seqs=args.max_num_seqs,
                    max_num_batched_tokens=args.max_num_batched_tokens, cache_memory=args.cache_memory,
                    memory_budget=args.memory_budget, max_model_len=args.max_model_len, block_size=args.block_size,
                    max_resident_seqs=args.max_resident_seqs, state_offload_dir=args.state_offload_dir,
                    trunk=args.trunk, vision=not args.no_vision, vision_dtype=args.vision_dtype, enable_prefix_caching=args.enable_prefix_caching,
                    prefix_cache_memory=args.prefix_cache_memory, prefix_cache_spill_dir=args.prefix_cache_spill_dir,
                    prefix_cache_spill_bytes=args.prefix_cache_spill_bytes, speculative_config=args.speculative_config)
    if hasattr(args, "max_image_bytes"):   # k3 serve's image limits (cli/vision_args.py)
        from k3.cli.vision_args import image_limits

        settings["image_limits"] = image_limits(args)
    try:
        return EngineConfig(**{**settings, **fixed})
    except ValueError as e:
        raise ValueError(_as_flags(str(e), settings)) from None


def _as_flags(message: str, settings: dict) -> str:
    """EngineConfig's message in the flags' names (max_num_seqs -> --max-num-seqs): what the user typed."""
    for name in sorted(settings, key=len, reverse=True):
        if "_" in name and name != "image_limits":
            message = re.sub(rf"(?<![-\w]){name}\b", "--" + name.replace("_", "-"), message)
        elif message.startswith(name):
            message = "--" + message
    return message
