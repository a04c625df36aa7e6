"""k3 synth OUT [--preset tiny|mid|k3] [--config config.json] [--layers N] [--experts E] [--seed N] [--shards N]"""

from __future__ import annotations

MAX_BYTES_WITHOUT_FORCE = 64 * 2 ** 30


def add_arguments(p) -> None:
    p.add_argument("out", nargs="?", help="directory to write the checkpoint into")
    p.add_argument("--out", dest="out_flag", help="same as OUT (kept for older scripts)")
    p.add_argument("--preset", default="tiny", help="preset to size it (tiny, mid, k3 = the released dimensions)")
    p.add_argument("--config", help="a config.json to size it instead of a preset")
    p.add_argument("--layers", type=int, help="keep the first N layers (real width; e.g. 4 for a K3 slice)")
    p.add_argument("--experts", type=int, help="routed experts per MoE layer")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--no-tokenizer", action="store_true",
                   help="skip the byte-level test tokenizer written where the vocabulary pairs with one (tiny-chat, k3)")
    p.add_argument("--force", action="store_true", help=f"allow more than {MAX_BYTES_WITHOUT_FORCE >> 30} GiB")


def run(args) -> int:
    from k3.cli.target import resolve_config
    from k3.config.presets import shrink
    from k3.testing import make_checkpoint
    from k3.testing.checkpoint import pairs_with_tokenizer
    from k3.tools.inspect import summarize
    from k3.tools.progress import byte_progress

    out = args.out or args.out_flag
    if not out:
        raise ValueError("give the output directory: k3 synth OUT")
    config, _, name = resolve_config(args.config or args.preset)
    config = shrink(config, args.layers, args.experts)
    size = summarize(config).bytes_tensors
    if size > MAX_BYTES_WITHOUT_FORCE and not args.force:
        raise ValueError(f"{name} would write {size:,} bytes; pass --force if you mean it (or --layers/--experts)")
    if args.shards < 1:
        raise ValueError("--shards must be >= 1")
    with byte_progress("writing tensors", size) as tick:
        tokenizer = pairs_with_tokenizer(config) and not args.no_tokenizer
        path = make_checkpoint(out, config, seed=args.seed, num_shards=args.shards, tick=tick, tokenizer=tokenizer)
    print(f"wrote a RANDOM-WEIGHT checkpoint ({name}, {config.num_hidden_layers} layers, {config.num_experts} "
          f"experts, {size:,} tensor bytes, seed {args.seed}) tensor by tensor to {path}"
          + ("; with a byte-level test tokenizer (tiktoken.model), so it can be served" if tokenizer else
             "; no tokenizer (its vocabulary does not pair with a test one: serve and chat need --tokenizer DIR)"))
    return 0
