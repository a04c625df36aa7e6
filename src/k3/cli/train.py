"""k3 train --config PRESET|CONFIG.json --data DIR --out DIR [--steps N] ... (resumes from OUT/checkpoint.pt)"""

from __future__ import annotations

import json
from dataclasses import fields


def add_arguments(p) -> None:
    from k3.train.loop import TrainConfig

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

    config, _, _ = resolve_config(args.config)
    values = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if f.name not in ("resume",)}
    trainer = Trainer(TrainConfig(**values, resume=not args.no_resume), config)
    trainer.run()
    if trainer.rank == 0 and not args.no_export:
        report = finish(trainer, f"{args.out}/model")
        print(json.dumps(report))
    distributed.teardown()
    return 0
