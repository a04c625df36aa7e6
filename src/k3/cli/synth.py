"""k3 synth --out DIR [--preset tiny|mid] [--config config.json] [--seed N] [--shards N]"""

from __future__ import annotations

MAX_BYTES_WITHOUT_FORCE = 64 * 2 ** 30


def add_arguments(p) -> None:
    p.add_argument("--out", required=True, help="directory to write the checkpoint into")
    p.add_argument("--preset", default="tiny", help="preset to size it (tiny, mid, k3)")
    p.add_argument("--config", help="a config.json to size it instead of a preset")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--force", action="store_true", help=f"allow more than {MAX_BYTES_WITHOUT_FORCE >> 30} GiB")


def run(args) -> int:
    from k3.cli.target import resolve_config
    from k3.testing import make_checkpoint
    from k3.tools.inspect import summarize

    config, _, name = resolve_config(args.config or args.preset)
    size = summarize(config).bytes_tensors
    if size > MAX_BYTES_WITHOUT_FORCE and not args.force:
        raise ValueError(f"{name} would write {size:,} bytes; pass --force if you mean it")
    if args.shards < 1:
        raise ValueError("--shards must be >= 1")
    out = make_checkpoint(args.out, config, seed=args.seed, num_shards=args.shards)
    print(f"wrote a RANDOM-WEIGHT checkpoint ({name}, {size:,} tensor bytes, seed {args.seed}) to {out}")
    return 0
