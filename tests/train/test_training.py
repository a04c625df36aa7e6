import json
import os
import subprocess
import sys

import torch

from k3.train.loop import Trainer, TrainConfig
from train_helpers import CONFIG


def _cfg(data_dir, out, **kw):
    base = dict(data=str(data_dir), out=str(out), steps=6, batch_size=4, seq_len=32, lr=3e-3, warmup=2,
                eval_every=1000, save_every=1000, eval_batches=2, log_every=1)
    base.update(kw)
    return TrainConfig(**base)


def test_a_few_steps_reduce_the_loss(data_dir, tmp_path):
    trainer = Trainer(_cfg(data_dir, tmp_path, steps=30, batch_size=8, lr=1e-2, warmup=3), CONFIG)
    before = trainer.evaluate()
    record = trainer.run(progress=False)
    after = trainer.evaluate()
    assert after < before - 0.5, (before, after)
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 30 and all(r["loss"] > 0 for r in log)
    first = log[0]
    assert len(first["hidden_rms_by_depth"]) == CONFIG.num_hidden_layers
    assert "layer00" in first["grad_norm_by_layer"] and len(first["expert_load_max_over_mean"]) == 4
    assert record["step"] == 29


def test_router_bias_moves_toward_balance(data_dir, tmp_path, monkeypatch):
    """Each step, an expert loaded above the layer's mean loses `bias_rate` of router bias and one below
    gains it (auxiliary-loss-free balancing): checked against the loads the step really saw."""
    from k3.train import observe

    seen, real = [], observe.balance_routers

    def recording(model, loads, rate):
        before = [m.gate.e_score_correction_bias.clone() for m in observe.moe_layers(model)]
        out = real(model, loads, rate)
        after = [m.gate.e_score_correction_bias.clone() for m in observe.moe_layers(model)]
        seen.append((loads, before, after))
        return out

    monkeypatch.setattr(observe, "balance_routers", recording)
    trainer = Trainer(_cfg(data_dir, tmp_path, steps=5, bias_rate=0.01), CONFIG)
    trainer.run(progress=False)
    assert len(seen) == 5
    moved = 0
    for loads, before, after in seen:
        for load, b0, b1 in zip(loads, before, after):
            load = load.float()
            delta = b1 - b0
            assert torch.allclose(delta[load > load.mean()], torch.tensor(-0.01)), "overloaded experts must lose bias"
            assert torch.allclose(delta[load < load.mean()], torch.tensor(0.01)), "underloaded experts must gain bias"
            moved += int((load != load.mean()).sum())
    assert moved > 0, "the run never saw an imbalance to correct"
    bias = trainer.model.model.layers[1].block_sparse_moe.gate.e_score_correction_bias
    assert not bias.requires_grad


def test_resume_continues_bit_identically(data_dir, tmp_path):
    straight = Trainer(_cfg(data_dir, tmp_path / "a", steps=6), CONFIG)
    straight.run(progress=False)
    first = Trainer(_cfg(data_dir, tmp_path / "b", steps=3, save_every=3), CONFIG)
    first.run(progress=False)
    resumed = Trainer(_cfg(data_dir, tmp_path / "b", steps=6), CONFIG)
    assert resumed.step == 3
    resumed.run(progress=False)
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_two_process_data_parallel_matches_single_process(data_dir, tmp_path):
    args = ["--config", "tiny-chat", "--data", str(data_dir), "--steps", "4", "--batch-size", "4", "--seq-len", "32",
            "--save-every", "4", "--eval-every", "1000", "--log-every", "1", "--no-export"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    single = subprocess.run([sys.executable, "-m", "k3.cli.main", "train", *args, "--out", str(tmp_path / "one")],
                            capture_output=True, text=True, env=env)
    assert single.returncode == 0, single.stderr[-2000:]
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "k3.cli.main", "train", *args, "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, env=env)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    one = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=False)["model"]
    two = torch.load(tmp_path / "two" / "checkpoint.pt", weights_only=False)["model"]
    for k in one:
        ref = one[k].double()
        err = (two[k].double() - ref).norm() / ref.norm().clamp_min(1e-12)
        assert err < 1e-4, (k, float(err))


def test_finish_uses_the_runs_eval_batches_says_what_it_does_and_qat_runs(data_dir, tmp_path):
    """After a run with QAT steps: finish() measures with --eval-batches (not a fixed 32), says each
    stage, exports a checkpoint that loads, and reports what MXFP4 rounding costs."""
    import k3
    from k3.train.finish import finish

    trainer = Trainer(_cfg(data_dir, tmp_path, steps=4, eval_batches=3, qat_steps=2), CONFIG)
    trainer.run(progress=False)
    banks = [m for m in trainer.model.modules() if hasattr(m, "fake_quant")]
    assert banks and all(m.fake_quant for m in banks), "the last --qat-steps train with MXFP4 rounding on"
    lines = []
    report = finish(trainer, tmp_path / "model", say=lines.append)
    assert not any(m.fake_quant for m in banks)
    assert report["eval_tokens"] == 3 * 4 * 32 and report["steps"] == 4
    assert [line.split(" ")[0] for line in lines] == ["validation", "validation", "exporting"] and "3 batches" in lines[0]
    assert abs(report["mxfp4_ppl_cost"]) < 0.5 and report["val_loss_mxfp4"] > 0
    model = k3.load(tmp_path / "model")
    assert model.config.num_hidden_layers == CONFIG.num_hidden_layers


def test_a_preset_takes_the_datas_vocabulary_and_a_config_must_match_it(data_dir, tmp_path, capsys):
    import json as _json

    from k3.cli.main import main
    from k3.config.hf import to_hf_dict
    from k3.config.presets import tiny

    args = ["--data", str(data_dir), "--steps", "1", "--batch-size", "2", "--seq-len", "16", "--eval-every", "1000",
            "--save-every", "1000", "--no-export"]
    assert main(["train", "--config", "tiny", *args, "--out", str(tmp_path / "a")]) == 0
    assert "takes the data's vocabulary (768 tokens; eos <|end_of_msg|> = 514)" in capsys.readouterr().err
    config_file = tmp_path / "config.json"
    config_file.write_text(_json.dumps(to_hf_dict(tiny())))
    assert main(["train", "--config", str(config_file), *args, "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "vocab_size 101" in err and "768 tokens" in err and "set vocab_size 768" in err
