import json
import subprocess
import sys

import pytest

from k3.cli.main import main

RELEASED = {
    "params_total": 2_779_484_478_208,
    "expert_bytes_per_token": 25_829_572_608,
    "mla_cache_bytes_per_token": 27_648,
    "kda_state_bytes_per_seq": 449_372_160,
    "kda_recurrent_bytes_per_seq": 434_110_464,
    "bytes_per_expert": 17_547_264,
    "params_routed_experts": 2_722_740_830_208,
}


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_released_preset_equals_spec(capsys):
    s = _json(capsys, ["inspect", "k3", "--json"])
    for key, value in RELEASED.items():
        assert s[key] == value, key
    assert round(s["params_active_per_token"] / 1e9, 2) == 104.19
    assert s["layer_schedule"].count("M") == 24 and s["layer_schedule"].endswith("KKKMM")
    assert s["attn_res_block_starts"] == [0, 12, 24, 36, 48, 60, 72, 84]


def test_inspect_table_names_the_numbers(capsys):
    assert main(["inspect", "k3"]) == 0
    out = capsys.readouterr().out
    for text in ("2,779,484,478,208", "104.19 B", "25,829,572,608", "27,648", "449,372,160"):
        assert text in out


def test_inspect_checkpoint_dir_and_config_json_agree(capsys, tiny_checkpoint):
    from_dir = _json(capsys, ["inspect", str(tiny_checkpoint), "--json"])
    from_file = _json(capsys, ["inspect", str(tiny_checkpoint / "config.json"), "--json"])
    assert from_dir["bytes_on_disk"] > from_dir["bytes_tensors"] > 0
    assert from_file["bytes_on_disk"] is None and from_dir["missing_shards"] == []
    disk = ("bytes_on_disk", "missing_shards")   # what only a directory can say
    assert {k: v for k, v in from_dir.items() if k not in disk} == {k: v for k, v in from_file.items() if k not in disk}


def test_synth_then_load(tmp_path, capsys):
    assert main(["synth", "--out", str(tmp_path / "c"), "--shards", "3", "--seed", "4"]) == 0
    assert "RANDOM-WEIGHT" in capsys.readouterr().out
    assert len(list((tmp_path / "c").glob("model-*-of-000003.safetensors"))) == 3


def test_synth_refuses_the_full_model_without_force(tmp_path, capsys):
    assert main(["synth", "--out", str(tmp_path), "--preset", "k3"]) == 2
    assert "--force" in capsys.readouterr().err


def test_bad_target_is_a_clear_error_not_a_traceback(capsys):
    assert main(["inspect", "no-such-thing"]) == 2
    err = capsys.readouterr().err
    assert "neither a checkpoint directory" in err and "Traceback" not in err


def test_console_script_demo(tmp_path):
    out = subprocess.run([sys.executable, "-m", "k3.cli.main", "demo", "--out", str(tmp_path / "d")],
                         capture_output=True, text=True, check=True).stdout
    assert "RANDOM-WEIGHT" in out and "relative error" in out
    assert "an image in a chat: a 640x480 PNG becomes" in out        # the default preset has a vision tower


def test_generate_streams_and_summarises(tiny_checkpoint, capsys):
    assert main(["generate", "--model", str(tiny_checkpoint), "--prompt-ids", "1,2,3", "--max-tokens", "6",
                 "--ignore-eos", "--cache-memory", "8MiB"]) == 0
    out = capsys.readouterr()
    (tokens,) = out.out.strip().splitlines()          # stdout holds the output only; the summary is on stderr
    assert len(tokens.split()) == 6 and all(t.isdigit() for t in tokens.split())
    assert "prompt 3 tokens, generated 6, finish length" in out.err and "TTFT" in out.err
    assert "cache capacity" in out.err


def test_generate_rejects_bad_ids(tiny_checkpoint, capsys):
    assert main(["generate", "--model", str(tiny_checkpoint), "--prompt-ids", "1,500"]) == 2
    assert "token ids must be integers in [0, 101)" in capsys.readouterr().err


def test_chat_template_prints_segments_and_ids(tmp_path, capsys):
    from k3.testing.tokenizer import write_tokenizer
    tok_dir = write_tokenizer(tmp_path / "tok")
    (tmp_path / "m.json").write_text(json.dumps([{"role": "user", "content": "Hi <|open|>"}]))
    (tmp_path / "t.json").write_text(json.dumps([{"type": "function", "function": {"name": "f"}}]))
    assert main(["chat-template", "--messages", str(tmp_path / "m.json"), "--tools", str(tmp_path / "t.json"),
                 "--tokenizer", str(tok_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == 'special "<|open|>"' and 'text    "Hi <|open|>"' in out
    assert out[-1].startswith("token ids (")
    assert main(["chat-template", "--messages", str(tmp_path / "m.json"), "--no-thinking", "--text"]) == 0
    assert capsys.readouterr().out.rstrip().endswith('<|open|>message role="assistant"<|sep|><|open|>response<|sep|>')


def test_chat_template_bad_input(tmp_path, capsys):
    (tmp_path / "m.json").write_text("[{")
    assert main(["chat-template", "--messages", str(tmp_path / "m.json")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    (tmp_path / "m.json").write_text('[{"role": "user", "content": [{"type": "image_url"}]}]')
    assert main(["chat-template", "--messages", str(tmp_path / "m.json")]) == 2
    assert "needs `image_url.url`" in capsys.readouterr().err
    (tmp_path / "m.json").write_text('[{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "v"}}]}]')
    assert main(["chat-template", "--messages", str(tmp_path / "m.json")]) == 2
    assert "not supported" in capsys.readouterr().err


def test_generate_text_prompt(tmp_path, capsys):
    from k3.config.presets import tiny_chat
    from k3.testing import make_checkpoint
    d = make_checkpoint(tmp_path / "c", tiny_chat(), tokenizer=True)
    assert main(["generate", "--model", str(d), "--prompt", "Hello", "--max-tokens", "5", "--ignore-eos",
                 "--cache-memory", "8MiB"]) == 0
    assert "generated 5, finish length" in capsys.readouterr().err


def test_synth_writes_tensor_by_tensor_and_slices_real_configs(tmp_path):
    """600 MB written with peak RSS growth well under it; --layers/--experts slice a preset at full width."""
    import json as _json
    import subprocess
    import sys

    child = ("import sys\nimport torch, k3.testing, k3.tools.inspect\nfrom k3.cli.main import main\n"
             "base = int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) * 1024\n"
             "code = main(['synth', sys.argv[1], '--preset', 'mid', '--experts', '128', '--shards', '3'])\n"
             "peak = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) * 1024\n"
             "print(code, peak - base)")
    import os

    # glibc's default allocator: CI raises the mmap/trim thresholds (MACHINE.md), which keeps freed
    # tensors in the heap and would measure the allocator rather than the writer.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", child, str(tmp_path / "big")], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    code, grown = map(int, out.stdout.split()[-2:])
    written = sum(p.stat().st_size for p in (tmp_path / "big").glob("*.safetensors"))
    assert code == 0 and written > 550e6 and grown < written / 2
    assert main(["synth", str(tmp_path / "slice"), "--preset", "mid", "--layers", "3", "--experts", "5"]) == 0
    raw = _json.loads((tmp_path / "slice" / "config.json").read_text())["text_config"]
    assert raw["num_hidden_layers"] == 3 and raw["num_experts"] == 5 and raw["hidden_size"] == 1024
    assert main(["verify", str(tmp_path / "slice")]) == 0


def test_plan_released_config(capsys):
    assert main(["plan", "k3", "--memory-budget", "200GB", "--disk-bandwidth", "3GB", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["mode"] == "stream-experts" and plan["expert_bytes_per_token"] == 25_829_572_608
    assert plan["resident_bytes"] <= 200e9 and plan["seconds_per_token"] > plan["streamed_bytes_per_token"] / 3e9
    assert main(["plan", "k3", "--memory-budget", "64GB", "--disk-bandwidth", "3GB", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["mode"] == "stream-trunk" and plan["resident_bytes"] <= 64e9 < plan["trunk_bytes"]
    assert plan["minimum_budget"] < 64e9 and plan["trunk_streamed_bytes_per_token"] > 0
    assert main(["plan", "k3", "--memory-budget", "8GB", "--disk-bandwidth", "3GB"]) == 2
    assert "too small" in capsys.readouterr().err


def test_generate_save_and_resume_state(tiny_checkpoint, tmp_path, capsys):
    def ids(args):
        assert main(["generate", "--model", str(tiny_checkpoint), "--max-tokens", *args]) == 0
        return [int(t) for t in capsys.readouterr().out.split("\n")[0].split()]

    whole = ids(["7", "--prompt-ids", "1,2,3", "--ignore-eos"])
    first = ids(["3", "--prompt-ids", "1,2,3", "--ignore-eos", "--save-state", str(tmp_path / "s")])
    rest = ids(["4", "--resume-state", str(tmp_path / "s"), "--ignore-eos"])
    assert first + rest == whole
    assert main(["generate", "--model", str(tiny_checkpoint), "--resume-state", str(tmp_path / "nope")]) == 2


def test_generate_with_a_memory_budget_reports_streaming(tiny_checkpoint, capsys):
    from k3.config import load_config
    from k3.streaming import plan_memory

    p = plan_memory(load_config(tiny_checkpoint), 10 ** 12, state_bytes=8 * 2 ** 20)
    budget = p.trunk_bytes + p.state_bytes + 3 * p.expert_bytes
    assert main(["generate", "--model", str(tiny_checkpoint), "--prompt-ids", "1,2,3", "--max-tokens", "4",
                 "--cache-memory", "8MiB", "--memory-budget", str(budget)]) == 0
    out = capsys.readouterr()
    assert "memory plan: stream-experts" in out.err
    assert "GB read per token" in out.err and "hit rate" in out.err


def test_generate_resumes_from_the_last_runs_spilled_prefix(tiny_checkpoint, tmp_path, capsys):
    ids = ",".join(str(i) for i in range(1, 21))
    base = ["generate", "--model", str(tiny_checkpoint), "--max-tokens", "3", "--ignore-eos", "--cache-memory", "8MiB",
            "--prefix-cache-spill-dir", str(tmp_path)]
    assert main(base + ["--prompt-ids", ids]) == 0
    assert "prefix cache" not in capsys.readouterr().err
    assert main(base + ["--prompt-ids", ids + ",7"]) == 0
    assert "[prefix cache: 20 of 21 prompt tokens reused]" in capsys.readouterr().err
    assert main(base + ["--prompt-ids", ids + ",7", "--no-enable-prefix-caching"]) == 0
    assert "prefix cache" not in capsys.readouterr().err


def test_generate_with_speculative_decoding(tiny_checkpoint, capsys):
    base = ["generate", "--model", str(tiny_checkpoint), "--prompt-ids", "5,6,7,5,6,7,5,6", "--max-tokens", "12",
            "--ignore-eos", "--cache-memory", "8MiB"]
    assert main(base) == 0
    plain = capsys.readouterr().out.splitlines()[0]
    spec = '{"method": "draft_model", "model": "%s", "num_speculative_tokens": 3}' % tiny_checkpoint
    assert main(base + ["--speculative-config", spec]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].split() == plain.split()           # greedy: the same tokens
    assert any("[speculative:" in line and "(100.0%)" in line for line in out.err.splitlines())
    assert main(base + ["--speculative-config", '{"method": "ngram"}']) == 2
    assert "num_speculative_tokens" in capsys.readouterr().err
