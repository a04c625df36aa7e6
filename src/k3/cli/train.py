"""k3 train --config PRESET|CONFIG.json --data DIR --out DIR [--steps N] ... (resumes from OUT/checkpoint.pt)"""

from __future__ import annotations

import json
import sys
from dataclasses import fields


def add_arguments(p) -> None:
    from k3.train.settings import TrainConfig

    p.add_argument("--config", required=True, help="preset name (e.g. prose, tiny) or a config.json")
    p.add_argument("--data", required=True, help="directory made by `k3 prepare-data`")
    p.add_argument("--out", required=True, help="run directory: checkpoint, log, exported model in OUT/model")
    for f in fields(TrainConfig):
        if f.name in ("data", "out", "resume"):
            continue
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    p.add_argument("--no-resume", action="store_true", help="start over even if OUT/checkpoint.pt exists")
    p.add_argument("--no-export", action="store_true", help="skip the official-layout export at the end")


def run(args) -> int:
    from k3.cli.target import resolve_config
    from k3.train import distributed
    from k3.train.finish import finish
    from k3.train.loop import Trainer, TrainConfig

    config, _, name = resolve_config(args.config)
    config = fit_vocabulary(config, name, args.config, args.data)
    values = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if f.name not in ("resume",)}
    trainer = Trainer(TrainConfig(**values, resume=not args.no_resume), config)
    trainer.run()
    if trainer.rank == 0 and not args.no_export:
        report = finish(trainer, f"{args.out}/model")
        print(json.dumps(report))
    distributed.teardown()
    return 0


def fit_vocabulary(config, name: str, target: str, data: str):
    """A preset takes the prepared data's vocabulary (and K3's special ids inside it: [BOS], <|end_of_msg|>
    and the last special, as released); a config.json must already match it."""
    from dataclasses import replace
    from pathlib import Path

    from k3.cli.target import PRESETS
    from k3.train.data import TokenData

    vocab = TokenData.load(data).vocab_size
    if config.vocab_size == vocab:
        return config
    if target not in PRESETS or Path(target).exists():
        again = (f", or prepare the data with `k3 prepare-data --vocab-size {config.vocab_size}`"
                 if config.vocab_size >= 512 else "")
        raise ValueError(f"{name} has vocab_size {config.vocab_size} but the data in {data} was tokenized with "
                         f"{vocab} tokens; set vocab_size {vocab} in the config{again}")
    specials = vocab - 256  # the 256 specials follow the ranks
    print(f"k3 train: {name} takes the data's vocabulary ({vocab} tokens; eos <|end_of_msg|> = {specials + 2})",
          file=sys.stderr)
    return replace(config, vocab_size=vocab, bos_token_id=specials, eos_token_id=specials + 2,
                   pad_token_id=vocab - 1)
