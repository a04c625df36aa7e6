"""k3 prepare-data --text FILE [FILE ...] --out DIR [--vocab-size N] [--val-fraction F] [--tokenizer DIR]"""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("--text", nargs="+", required=True, help="UTF-8 text files")
    p.add_argument("--out", required=True)
    p.add_argument("--vocab-size", type=int, default=4096, help="BPE ranks + 256 specials")
    p.add_argument("--val-fraction", type=float, default=0.02, help="tail of each file held out")
    p.add_argument("--tokenizer", help="use this tokenizer instead of training one")


def run(args) -> int:
    from k3.train.prepare import prepare

    meta = prepare(args.text, args.out, args.vocab_size, args.val_fraction, args.tokenizer)
    print(json.dumps({k: v for k, v in meta.items() if k != "files"}))
    return 0
