"""The training loop: AdamW with linear warm-up and cosine decay, gradient accumulation and clipping,
router-bias balancing, periodic evaluation, resumable checkpoints, a JSONL log and a progress line.

A checkpoint holds the model, the optimizer and the step; data order is a function of (seed, step),
so resuming continues bit-identically. Rank 0 logs, saves and exports.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from k3.config import K3Config, from_hf_dict, to_hf_dict
from k3.train import distributed, observe
from k3.train.data import TokenData
from k3.train.init import init_model
from k3.train.settings import TrainConfig

CHECKPOINT = "checkpoint.pt"
LOG = "train_log.jsonl"


def lr_at(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


class Trainer:
    def __init__(self, cfg: TrainConfig, model_config: K3Config):
        if cfg.batch_size % cfg.grad_accum:
            raise ValueError("batch_size must be divisible by grad_accum")
        self.cfg = cfg
        self.out = Path(cfg.out)
        self.data = TokenData.load(cfg.data)
        if model_config.vocab_size != self.data.vocab_size:
            raise ValueError(f"model vocab_size {model_config.vocab_size} != data vocab_size {self.data.vocab_size}")
        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto"
                                   else cfg.device)
        self.rank, self.world = distributed.setup(self.device)
        if self.device.type == "cuda" and self.world > 1:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        micro = cfg.batch_size // cfg.grad_accum
        if micro % self.world:
            raise ValueError(f"micro-batch {micro} must divide evenly over {self.world} ranks")
        self.rows = slice(self.rank * micro // self.world, (self.rank + 1) * micro // self.world)
        self.model = init_model(model_config, cfg.seed).to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self._groups(), lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)
        self.hidden = observe.HiddenRMS(self.model)
        self.step = 0
        if cfg.resume and (self.out / CHECKPOINT).is_file():
            self.load(self.out / CHECKPOINT)

    def _groups(self):
        # Weight decay on matrices only: not on norms, gates' A_log/dt_bias, or the [1, D] AttnRes queries.
        decay = [p for p in self.params if p.dim() >= 2 and p.shape[0] > 1]
        rest = [p for p in self.params if not (p.dim() >= 2 and p.shape[0] > 1)]
        return [{"params": decay, "weight_decay": self.cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]

    def _autocast(self):
        if self.cfg.dtype == "bfloat16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def loss_on(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = x.to(self.device), y.to(self.device)
        with self._autocast():
            logits = self.model(x)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    def train_step(self) -> dict:
        cfg, model = self.cfg, self.model
        model.train()
        self._set_fake_quant(self.step >= cfg.steps - cfg.qat_steps)
        for g in self.opt.param_groups:
            g["lr"] = lr_at(cfg, self.step)
        total_loss, loads = 0.0, None
        logging = self.rank == 0 and (self.step % cfg.log_every == 0 or self.step == cfg.steps - 1)
        self.hidden.active = logging
        for micro in range(cfg.grad_accum):
            x, y = self.data.batch("train", cfg.seed, self.step, micro, cfg.batch_size // cfg.grad_accum,
                                   cfg.seq_len, self.rows)
            loss = self.loss_on(x, y) / cfg.grad_accum
            loss.backward()
            total_loss += float(loss.detach())
            step_loads = observe.collect_loads(model)
            loads = step_loads if loads is None else [a + b for a, b in zip(loads, step_loads)]
            self.hidden.active = False
        distributed.average_gradients(self.params, self.world)
        loads = [distributed.sum_across(load, self.world) for load in loads or []]
        total_loss = float(distributed.sum_across(torch.tensor(total_loss, device=self.device), self.world)) / self.world
        record = {"step": self.step, "loss": total_loss, "lr": self.opt.param_groups[0]["lr"]}
        if logging:
            record["grad_norm_by_layer"] = observe.grad_norms_by_layer(model)
            record["hidden_rms_by_depth"] = [self.hidden.values[i] for i in sorted(self.hidden.values)]
        record["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.params, cfg.clip))
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        record["expert_load_max_over_mean"] = observe.balance_routers(model, loads, cfg.bias_rate)
        self.step += 1
        return record

    def _set_fake_quant(self, on: bool) -> None:
        for moe in observe.moe_layers(self.model):
            if hasattr(moe.experts, "fake_quant"):
                moe.experts.fake_quant = on

    @torch.no_grad()
    def evaluate(self, batches: int | None = None) -> float:
        """Mean validation loss over fixed windows (the same ones every time)."""
        self.model.eval()
        n = batches or self.cfg.eval_batches
        losses = [float(self.loss_on(*self.data.batch("val", 12345, i, 0, self.cfg.batch_size // self.cfg.grad_accum,
                                                     self.cfg.seq_len))) for i in range(n)]
        return sum(losses) / len(losses)

    def save(self) -> None:
        if self.rank != 0:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        state = {"model": self.model.state_dict(), "optim": self.opt.state_dict(), "step": self.step,
                 "model_config": to_hf_dict(self.model.config), "train_config": asdict(self.cfg)}
        tmp = self.out / (CHECKPOINT + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.out / CHECKPOINT)

    def load(self, path: Path) -> None:
        state = torch.load(path, map_location=self.device, weights_only=False)
        if from_hf_dict(state["model_config"]) != self.model.config:
            raise ValueError(f"{path} was trained with a different model config; use another --out or remove it")
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])
        self.step = state["step"]

    def run(self, progress: bool = True) -> dict:
        cfg = self.cfg
        log = None
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            log = open(self.out / LOG, "a")
        start, start_step = time.perf_counter(), self.step
        record: dict = {}
        while self.step < cfg.steps:
            record = self.train_step()
            if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                record["val_loss"] = self.evaluate()
            if self.step % cfg.save_every == 0 or self.step == cfg.steps:
                self.save()
            if log is not None:
                log.write(json.dumps(record) + "\n")
                log.flush()
                if progress:
                    _progress(self.step, cfg.steps, record, time.perf_counter() - start, self.step - start_step)
        if log is not None:
            log.close()
            if progress:
                print(file=sys.stderr)
        return record


def _progress(step: int, total: int, record: dict, elapsed: float, done: int) -> None:
    eta = elapsed / max(done, 1) * (total - step)
    val = f" val {record['val_loss']:.3f}" if "val_loss" in record else ""
    print(f"\rstep {step}/{total} loss {record['loss']:.3f}{val} lr {record['lr']:.2e} "
          f"{elapsed:.0f}s elapsed, ETA {eta:.0f}s   ", end="", file=sys.stderr, flush=True)
