"""After training: export the official layout and measure what MXFP4 export costs (validation perplexity
of the float model vs the same model with export's rounding)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from k3.train.export import export, rounded_like_export
from k3.train.loop import Trainer


def finish(trainer: Trainer, out_dir: str | Path, eval_batches: int = 32) -> dict:
    out = Path(out_dir)
    model = trainer.model
    for moe_experts in (m for m in model.modules() if hasattr(m, "fake_quant")):
        moe_experts.fake_quant = False
    float_loss = trainer.evaluate(eval_batches)
    trainer.model = rounded_like_export(model, mxfp4=True)
    mxfp4_loss = trainer.evaluate(eval_batches)
    trainer.model = model
    export(model, out, tokenizer_dir=trainer.data.meta.get("tokenizer"))
    report = {"val_loss_float": float_loss, "val_ppl_float": math.exp(float_loss),
              "val_loss_mxfp4": mxfp4_loss, "val_ppl_mxfp4": math.exp(mxfp4_loss),
              "mxfp4_ppl_cost": math.exp(mxfp4_loss - float_loss) - 1, "steps": trainer.step,
              "tokens_seen": trainer.step * trainer.cfg.batch_size * trainer.cfg.seq_len,
              "eval_tokens": eval_batches * (trainer.cfg.batch_size // trainer.cfg.grad_accum) * trainer.cfg.seq_len}
    (out / "export_report.json").write_text(json.dumps(report, indent=2))
    torch.save(model.state_dict(), out.parent / "final_float_state.pt")
    return report
