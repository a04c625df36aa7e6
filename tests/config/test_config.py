import copy
import json

import pytest

from k3.config import ConfigError, from_hf_dict, load_config, released, tiny, to_hf_dict
from k3.config.presets import released_hf_dict


def test_released_schedule():
    c = released()
    assert c.mla_layers == tuple(range(3, 92, 4)) + (92,)
    assert len(c.kda_layers) == 69 and c.layer_types[0] == "kda"
    assert c.mlp_types[0] == "dense" and set(c.mlp_types[1:]) == {"moe"}
    assert c.expert_format == "mxfp4" and c.mla_norm_eps == 1e-6 and c.gate_lower_bound == -5.0
    assert c.attn_res_block_size == 12 and c.routed_expert_hidden_size == 3584


def test_bare_kimi_linear_text_config_parses_like_the_wrapper():
    text = released_hf_dict()["text_config"]
    assert from_hf_dict(text) == released().replace(vision=None)   # the bare text config has no tower


def test_quantization_config_may_sit_at_top_level():
    raw = released_hf_dict()
    raw["quantization_config"] = raw["text_config"].pop("quantization_config")
    assert from_hf_dict(raw).expert_format == "mxfp4"


def test_no_quantization_config_means_unquantized_experts():
    raw = released_hf_dict()
    del raw["text_config"]["quantization_config"]
    assert from_hf_dict(raw).expert_format is None


def test_round_trip_through_config_json(tmp_path):
    c = tiny()
    (tmp_path / "config.json").write_text(json.dumps(to_hf_dict(c)))
    assert load_config(tmp_path) == c


def _broken(edit):
    raw = copy.deepcopy(released_hf_dict())
    edit(raw["text_config"], raw)
    return raw


@pytest.mark.parametrize("edit,key", [
    (lambda t, r: r.update(model_type="llama"), "model_type"),
    (lambda t, r: r.pop("text_config"), "text_config"),
    (lambda t, r: t["linear_attn_config"]["kda_layers"].append(4), "linear_attn_config"),
    (lambda t, r: t["linear_attn_config"]["kda_layers"].append(94), "kda_layers"),
    (lambda t, r: t["linear_attn_config"]["full_attn_layers"].remove(93), "linear_attn_config"),
    (lambda t, r: t.update(num_experts_per_token=900), "num_experts_per_token"),
    (lambda t, r: t["linear_attn_config"].update(gate_lower_bound=5.0), "gate_lower_bound"),
    (lambda t, r: t.update(hidden_act="gelu"), "hidden_act"),
    (lambda t, r: t.update(moe_router_activation_func="softmax"), "moe_router_activation_func"),
    (lambda t, r: t.update(num_expert_group=8), "num_expert_group"),
    (lambda t, r: t["quantization_config"].update(format="nvfp4-pack-quantized"), "quantization_config"),
    (lambda t, r: t.update(mla_use_nope=False), "mla_use_nope"),
    (lambda t, r: t.update(hidden_size="7168"), "hidden_size"),
    (lambda t, r: t.update(moe_intermediate_size=3000), "moe_intermediate_size"),
], ids=["model_type", "no-text_config", "overlap", "out-of-range", "uncovered", "top-k", "bound-sign", "act",
        "router", "groups", "quant", "rope", "type", "group-size"])
def test_inconsistent_configs_name_the_key(edit, key):
    with pytest.raises(ConfigError, match=key):
        from_hf_dict(_broken(edit))


def test_unreadable_config_file(tmp_path):
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="no config.json"):
        load_config(tmp_path / "missing")


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        tiny().hidden_size = 3


@pytest.mark.parametrize("edit,key", [
    (lambda t: t.update(rms_norm_eps=[1]), "rms_norm_eps"),
    (lambda t: t.update(routed_scaling_factor={}), "routed_scaling_factor"),
    (lambda t: t.update(routed_scaling_factor=float("inf")), "routed_scaling_factor"),
    (lambda t: t.update(rms_norm_eps=float("nan")), "rms_norm_eps"),
    (lambda t: t["linear_attn_config"].update(gate_lower_bound=[]), "gate_lower_bound"),
    (lambda t: t.update(tie_word_embeddings="no"), "tie_word_embeddings"),
    (lambda t: t.update(hidden_act=5), "hidden_act"),
    (lambda t: t.update(num_expert_group=[2]), "num_expert_group"),
    (lambda t: t["linear_attn_config"].update(use_full_rank_gate=1), "use_full_rank_gate"),
], ids=["eps-list", "scale-object", "scale-inf", "eps-nan", "bound-list", "flag-str", "act-int", "groups-list",
        "gate-flag-int"])
def test_non_scalar_and_non_finite_fields_are_config_errors(edit, key):
    """Issue 42: these were tracebacks from verify, inspect, doctor and k3.load (Infinity was accepted)."""
    raw = copy.deepcopy(released_hf_dict())
    edit(raw["text_config"])
    with pytest.raises(ConfigError, match=key):
        from_hf_dict(raw)


@pytest.mark.parametrize("command", ["inspect", "verify", "doctor"])
def test_the_cli_names_a_bad_config_field(tiny_checkpoint, tmp_path, command):
    import shutil
    import subprocess
    import sys

    d = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, d)
    raw = json.loads((d / "config.json").read_text())
    (raw.get("text_config") or raw)["rms_norm_eps"] = [1]
    (d / "config.json").write_text(json.dumps(raw))
    extra = ["--no-measure"] if command == "doctor" else []
    r = subprocess.run([sys.executable, "-m", "k3.cli.main", command, str(d), *extra], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "rms_norm_eps" in r.stderr + r.stdout and "Traceback" not in r.stderr, r.stderr
