"""The prefix-cache and speculative-decoding flags shared by `k3 serve`, `k3 generate`, `k3 bench --model`
(vLLM's names)."""

from __future__ import annotations

import argparse


def add_prefix_cache_arguments(p) -> None:
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse the state of earlier prompts' prefixes (exact; on by default)")
    p.add_argument("--prefix-cache-memory", metavar="SIZE",
                   help="part of --cache-memory kept for KDA snapshots (default a quarter; 0 keeps none)")
    p.add_argument("--prefix-cache-spill-dir", metavar="DIR",
                   help="write snapshots evicted from memory here, to resume from later (off by default)")
    p.add_argument("--prefix-cache-spill-bytes", metavar="SIZE", default="16GiB",
                   help="disk the spilled snapshots may take (default 16GiB)")
    p.add_argument("--speculative-config", metavar="JSON",
                   help='speculative decoding, vLLM\'s JSON: {"method": "ngram", "num_speculative_tokens": 4, '
                        '"prompt_lookup_max": 4, "prompt_lookup_min": 2} or {"method": "draft_model", '
                        '"model": "PATH", "num_speculative_tokens": 4} (off by default)')


def prefix_cache_kwargs(args) -> dict:
    """The LLM(...) keywords for those flags."""
    memory = args.prefix_cache_memory
    return dict(enable_prefix_caching=args.enable_prefix_caching,
                prefix_cache_memory=0 if memory in ("0", 0) else memory,
                prefix_cache_spill_dir=args.prefix_cache_spill_dir,
                prefix_cache_spill_bytes=args.prefix_cache_spill_bytes,
                speculative_config=args.speculative_config)
