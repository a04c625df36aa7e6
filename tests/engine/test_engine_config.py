"""k3.EngineConfig: one validated object behind LLM(...), LLMEngine and every command's engine flags."""

from __future__ import annotations

import json

import pytest
import torch

from k3.cli.engine_args import engine_config
from k3.cli.main import build_parser, main
from k3.engine import LLM, EngineConfig
from k3.engine.config import FIELDS
from k3.engine.speculative import SpeculativeConfig

FLAGS = ["--cache-memory", "64MiB", "--max-num-seqs", "3", "--max-num-batched-tokens", "96", "--no-vision",
         "--trunk", "int8", "--dtype", "bfloat16", "--prefix-cache-memory", "0", "--max-model-len", "300",
         "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}']
EXPECTED = EngineConfig(cache_memory=64 << 20, max_num_seqs=3, max_num_batched_tokens=96, vision=False, trunk="int8",
                        dtype=torch.bfloat16, prefix_cache_memory=0, max_model_len=300,
                        speculative_config={"method": "ngram", "num_speculative_tokens": 2})
COMMANDS = {"serve": [], "generate": ["hi"], "chat": [], "bench": ["--model", "default"],
            "eval": ["refusal", "--model", "default"], "check": ["refusal", "--model", "default"]}


def test_values_arrive_as_written_and_leave_as_the_engine_uses_them():
    c = EngineConfig(cache_memory="2GiB", memory_budget="24GB", dtype="bfloat16", prefix_cache_memory="0",
                     speculative_config='{"method": "ngram", "num_speculative_tokens": 3}')
    assert c.cache_memory == 2 << 30 and c.memory_budget == 24 * 10 ** 9 and c.dtype is torch.bfloat16
    assert c.prefix_cache_memory == 0 and c.speculative_config == SpeculativeConfig("ngram", 3)
    assert EngineConfig(dtype="auto").dtype is None


@pytest.mark.parametrize("settings, field", [
    ({"max_num_seqs": 0}, "max_num_seqs"), ({"max_num_batched_tokens": 2.5}, "max_num_batched_tokens"),
    ({"cache_memory": "lots"}, "cache_memory"), ({"block_size": -1}, "block_size"),
    ({"max_num_seqs": 2, "max_resident_seqs": 3}, "max_resident_seqs"), ({"max_model_len": 1}, "max_model_len"),
    ({"trunk": "int4"}, "trunk"), ({"dtype": "int8"}, "dtype"), ({"dtype": torch.int8}, "dtype"),
    ({"cache_memory": "1MiB", "prefix_cache_memory": "2MiB"}, "prefix_cache_memory"),
    ({"speculative_config": {"method": "ngram"}}, "speculative_config"), ({"seed": "x"}, "seed"),
])
def test_a_bad_value_names_its_field(settings, field):
    with pytest.raises(ValueError, match=field):
        EngineConfig(**settings)


def test_settings_are_json_and_read_back():
    settings = EXPECTED.settings()
    assert json.loads(json.dumps(settings)) == settings
    assert EngineConfig(**settings) == EXPECTED
    assert EngineConfig().settings() == {}


def test_replace_validates_and_refuses_unknown_settings():
    assert EXPECTED.replace(max_num_seqs=4).max_num_seqs == 4
    with pytest.raises(ValueError, match="max_num_seqs"):
        EXPECTED.replace(max_num_seqs=0)
    with pytest.raises(TypeError, match="max_num_seq.*k3.EngineConfig takes"):
        EXPECTED.replace(max_num_seq=4)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_reads_the_same_flags_into_the_same_config(command):
    args = build_parser().parse_args([command, *COMMANDS[command], *FLAGS])
    assert engine_config(args) == EXPECTED


def test_every_setting_but_the_seed_has_a_flag():
    """The seed seeds requests that bring none; commands take a sampling --seed of their own instead."""
    serve = next(a for a in build_parser()._actions if a.dest == "command").choices["serve"]
    flags = {s for a in serve._actions for s in a.option_strings}
    named = {"vision": "--no-vision", "image_limits": "--max-image-bytes"}
    missing = [f for f in sorted(FIELDS - {"seed"}) if named.get(f, "--" + f.replace("_", "-")) not in flags]
    assert not missing, missing


def test_each_default_lives_in_the_settings_and_help_shows_it():
    """No flag given: the config is EngineConfig()'s (or the command's own defaults); every flag's help
    and each field's default come from k3.config.engine_settings."""
    import dataclasses

    from k3.config.engine_settings import SETTINGS

    parser = build_parser()
    assert engine_config(parser.parse_args(["serve"])) == EngineConfig()
    chat = engine_config(parser.parse_args(["chat"]))
    assert chat == EngineConfig(max_num_seqs=1, cache_memory="512MiB")
    serve = next(a for a in parser._actions if a.dest == "command").choices["serve"]
    helps = {a.dest: a.help for a in serve._actions}
    for f in dataclasses.fields(EngineConfig):
        if "flag" in f.metadata:
            assert helps[f.name].startswith(SETTINGS[f.name].help) and f.default == SETTINGS[f.name].default, f.name
    assert {f.metadata.get("flag") for f in dataclasses.fields(EngineConfig)} >= set(SETTINGS)
    assert "(default: 1GiB)" in helps["cache_memory"] and "(default: 512)" in helps["max_num_batched_tokens"]


def test_a_bad_flag_fails_before_anything_loads_and_says_the_flag(capsys):
    assert main(["serve", "--max-num-seqs", "2", "--max-resident-seqs", "3", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "--max-resident-seqs (3) is more than --max-num-seqs (2)" in err and "Traceback" not in err


def test_llm_takes_a_config_or_its_fields_as_keywords(tiny_checkpoint):
    llm = LLM(str(tiny_checkpoint), EngineConfig(max_num_seqs=2, cache_memory="8MiB"), max_num_batched_tokens=64)
    assert llm.config == EngineConfig(max_num_seqs=2, cache_memory=8 << 20, max_num_batched_tokens=64)
    assert llm.engine.config is llm.config and llm.engine.scheduler.max_num_seqs == 2
    with pytest.raises(TypeError, match="max_num_seq"):
        LLM(str(tiny_checkpoint), max_num_seq=2)
    with pytest.raises(TypeError, match="config is a k3.EngineConfig"):
        LLM(str(tiny_checkpoint), torch.float32)

