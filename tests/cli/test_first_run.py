"""First-run conventions and errors (vLLM's shapes): the model and the prompt positional, a missing extra
named in one line, a config.json given for a directory, a missing tokenizer said in CLI words before
loading, and `| head` ending quietly."""

from __future__ import annotations

import subprocess
from pathlib import Path
import sys

import pytest

from k3.cli.main import build_parser, main, missing_extra


def test_the_model_is_positional_for_serve_and_the_prompt_for_generate():
    args = build_parser().parse_args(["serve", "/models/Kimi-K3", "--max-num-batched-tokens", "256",
                                      "--dtype", "bfloat16", "--device", "cpu", "--tokenizer", "/tok"])
    assert (args.model_path, args.max_num_batched_tokens, args.dtype, args.tokenizer) == (
        "/models/Kimi-K3", 256, "bfloat16", "/tok")
    assert build_parser().parse_args(["serve", "--model", "/m"]).model == "/m"
    assert build_parser().parse_args(["generate", "Once upon a time"]).prompt_text == "Once upon a time"


def test_two_different_models_are_refused(capsys):
    assert main(["serve", "/a", "--model", "/b"]) == 2
    assert "two models given" in capsys.readouterr().err


def test_a_missing_extra_is_one_line_naming_it():
    code = ("import sys; sys.modules['fastapi'] = None; from k3.cli.main import main; "
            "sys.exit(main(['serve']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.strip().splitlines()
    # run from this clone (an editable install): the fix is the clone's, since k3 is not on the package index
    root = Path(__file__).resolve().parents[2]
    assert line == (f"k3 serve: needs the [serve] extra (fastapi is not installed); in this clone: cd {root} && "
                    f"{sys.executable} -m pip install -e '.[serve]' torch==2.13.0")
    assert missing_extra(ModuleNotFoundError("x", name="numpy")) is None, "not an extra's module: a real bug"


def test_a_config_file_given_as_the_model_says_to_pass_its_directory(tiny_checkpoint, capsys):
    assert main(["generate", "--model", str(tiny_checkpoint / "config.json"), "--prompt-ids", "1,2"]) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and str(tiny_checkpoint) in err


def test_a_missing_tokenizer_is_said_in_cli_words_before_loading(tiny_checkpoint, capsys, monkeypatch):
    import k3.engine

    monkeypatch.setattr(k3.engine, "LLM", lambda *a, **k: pytest.fail("the model was loaded first"))
    assert main(["generate", "Hello", "--model", str(tiny_checkpoint)]) == 2
    err = capsys.readouterr().err
    assert "pass --tokenizer DIR" in err and "tokenizer=" not in err


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`k3 ... | head`: the reader leaves early; no 'Broken pipe' error, no traceback."""
    code = ("import sys, k3.cli.generate as g; from k3.cli.main import main\n"
            "def chatty(args):\n    for i in range(200000):\n        print('token', i)\n"
            "g.run = chatty\nsys.exit(main(['generate', '--prompt-ids', '1']))")
    script = tmp_path / "chatty.py"
    script.write_text(code)
    err = tmp_path / "err.txt"
    out = subprocess.run(f"'{sys.executable}' '{script}' 2>'{err}' | head -c 20", shell=True, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.startswith("token 0")
    assert err.read_text() == "", err.read_text()


def test_bench_against_a_dead_server_says_it_cannot_connect(capsys):
    from k3.testing.serving import free_port

    assert main(["bench", "--endpoint", f"http://127.0.0.1:{free_port()}", "--num-prompts", "1"]) == 2
    err = capsys.readouterr().err
    assert "cannot connect" in err and "--served-model-name" not in err


def test_eval_and_bench_take_the_same_model_name_flag():
    for cmd in (["eval", "--endpoint", "http://x", "--tasks", "refusal"], ["bench", "--endpoint", "http://x"]):
        args = build_parser().parse_args(cmd + ["--served-model-name", "m"])
        assert getattr(args, "model_name", None) == "m" or getattr(args, "served_model_name", None) == "m"
    assert build_parser().parse_args(["eval", "--endpoint", "u", "--tasks", "refusal", "--model-name", "m"]).model_name == "m"


def test_plan_measures_only_when_asked_and_remembers(monkeypatch, tmp_path, capsys):
    import json

    import k3.tools.machine as machine

    monkeypatch.setenv("K3_CACHE_DIR", str(tmp_path))

    def no_disk(*a, **k):
        raise AssertionError("a preset must not measure the disk of the current folder")

    monkeypatch.setattr(machine, "measure_disk", no_disk)
    monkeypatch.setattr(machine, "measure_memory", lambda: 30e9)
    assert main(["plan", "k3", "--memory-budget", "200GB", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["disk_bandwidth_source"].startswith("assumed") and r["memory_bandwidth_source"] == "measured"
    monkeypatch.setattr(machine, "measure_disk", lambda where, sample: (1.5e9, False))
    assert main(["plan", "k3", "--memory-budget", "200GB", "--measure", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["disk_bytes_per_s"] == 1.5e9
    monkeypatch.setattr(machine, "measure_disk", no_disk)
    monkeypatch.setattr(machine, "measure_memory", lambda: pytest.fail("memory was cached"))
    assert main(["plan", "k3", "--memory-budget", "200GB", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["disk_bytes_per_s"] == 1.5e9 and r["mem_bytes_per_s"] == 30e9
    for source in (r["disk_bandwidth_source"], r["memory_bandwidth_source"]):   # when, and how to refresh it
        assert source.startswith("cached from 20") and "--measure measures again" in source
    assert main(["plan", "k3", "--memory-budget", "200GB", "--disk-bandwidth", "5GB", "--memory-bandwidth",
                 "50GB", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["disk_bytes_per_s"], r["mem_bytes_per_s"]) == (5e9, 50e9)


def test_plan_refusals_speak_in_gb(capsys):
    bandwidths = ["--disk-bandwidth", "3GB", "--memory-bandwidth", "20GB"]
    assert main(["plan", "k3", "--memory-budget", "8GB", "--no-vision", *bandwidths]) == 2
    err = capsys.readouterr().err
    assert "8.00 GB is too small" in err and "give at least 9.37 GB" in err
    assert main(["plan", "k3", "--memory-budget", "8GB", *bandwidths]) == 2     # the tower's share is named
    assert "vision tower" in capsys.readouterr().err
