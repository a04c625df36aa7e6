"""After training: export the official layout and measure what MXFP4 export costs (validation perplexity
of the float model vs the same model with export's rounding)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

from k3.train.export import export, rounded_like_export
from k3.train.loop import Trainer


def finish(trainer: Trainer, out_dir: str | Path, eval_batches: int | None = None, say=None) -> dict:
    """eval_batches: validation batches per measurement (default the run's --eval-batches).
    say(line): where progress goes (default stderr); these minutes follow the last step's line."""
    say = say or (lambda line: print(f"k3 train: {line}", file=sys.stderr, flush=True))
    eval_batches = eval_batches or trainer.cfg.eval_batches
    out = Path(out_dir)
    model = trainer.model
    for moe_experts in (m for m in model.modules() if hasattr(m, "fake_quant")):
        moe_experts.fake_quant = False
    say(f"validation loss of the float model ({eval_batches} batches)")
    float_loss = trainer.evaluate(eval_batches)
    say(f"validation loss with export's MXFP4 rounding ({eval_batches} batches)")
    trainer.model = rounded_like_export(model, mxfp4=True)
    mxfp4_loss = trainer.evaluate(eval_batches)
    trainer.model = model
    say(f"exporting the official layout to {out}")
    export(model, out, tokenizer_dir=trainer.data.meta.get("tokenizer"))
    report = {"val_loss_float": float_loss, "val_ppl_float": math.exp(float_loss),
              "val_loss_mxfp4": mxfp4_loss, "val_ppl_mxfp4": math.exp(mxfp4_loss),
              "mxfp4_ppl_cost": math.exp(mxfp4_loss - float_loss) - 1, "steps": trainer.step,
              "tokens_seen": trainer.step * trainer.cfg.batch_size * trainer.cfg.seq_len,
              "eval_tokens": eval_batches * (trainer.cfg.batch_size // trainer.cfg.grad_accum) * trainer.cfg.seq_len}
    (out / "export_report.json").write_text(json.dumps(report, indent=2))
    torch.save(model.state_dict(), out.parent / "final_float_state.pt")
    return report
