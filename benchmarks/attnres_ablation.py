"""AttnRes ablation: the same data, budget, size and seed, trained with Block AttnRes and with the plain
pre-norm residual stream. Reports validation loss curves and hidden-state RMS by depth, and plots them.

    .venv/bin/python benchmarks/attnres_ablation.py --data data/prose --steps 150 --out runs/ablation

Prints a table, then one JSON line; writes OUT/attnres_ablation.png when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from k3.config.presets import prose
from k3.train.loop import Trainer, TrainConfig


def run_variant(name: str, block: int | None, args) -> dict:
    cfg = TrainConfig(data=args.data, out=str(Path(args.out) / name), steps=args.steps, batch_size=args.batch_size,
                      seq_len=args.seq_len, lr=args.lr, min_lr=args.lr / 10, warmup=max(1, args.steps // 15),
                      eval_every=args.eval_every, save_every=10 ** 9, eval_batches=args.eval_batches,
                      log_every=args.eval_every, seed=args.seed, resume=False)
    trainer = Trainer(cfg, prose(attn_res_block_size=block))
    curve, rms = [(0, trainer.evaluate())], []
    while trainer.step < cfg.steps:
        record = trainer.train_step()
        if trainer.step % cfg.eval_every == 0 or trainer.step == cfg.steps:
            curve.append((trainer.step, trainer.evaluate()))
        if "hidden_rms_by_depth" in record:
            rms = record["hidden_rms_by_depth"]
    return {"variant": name, "attn_res_block_size": block, "val_loss": curve, "hidden_rms_by_depth": rms}


def plot(results: list[dict], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for r in results:
        steps, losses = zip(*r["val_loss"])
        a.plot(steps, losses, marker="o", label=r["variant"])
        b.plot(range(len(r["hidden_rms_by_depth"])), r["hidden_rms_by_depth"], marker="o", label=r["variant"])
    a.set(xlabel="step", ylabel="validation loss", title="validation loss")
    b.set(xlabel="layer", ylabel="RMS of layer output", title="hidden-state RMS by depth (last logged step)",
          yscale="log")
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/prose")
    ap.add_argument("--out", default="runs/ablation")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    results = [run_variant("attnres", 3, args), run_variant("plain-residual", None, args)]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    plotted = plot(results, Path(args.out) / "attnres_ablation.png")
    print(f"{'step':>6}" + "".join(f"{r['variant']:>18}" for r in results))
    for i, (step, _) in enumerate(results[0]["val_loss"]):
        print(f"{step:>6}" + "".join(f"{r['val_loss'][i][1]:>18.4f}" for r in results))
    for r in results:
        print(f"{r['variant']}: hidden RMS by depth " + " ".join(f"{x:.2f}" for x in r["hidden_rms_by_depth"]))
    print("plot: " + (str(Path(args.out) / "attnres_ablation.png") if plotted else "matplotlib not installed"))
    print(json.dumps({"args": vars(args), "results": results}))


if __name__ == "__main__":
    main()
