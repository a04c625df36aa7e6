"""Bounds on every field a config.json may give (sizes, numbers, flags, names), checked in this one place
before anything is built from them: a wrong type or an out-of-range value is a ConfigError naming the key,
never a traceback from deep inside the loader, and never a model built on `Infinity`."""

from __future__ import annotations

from k3.config.model import ConfigError

# Every size a config may give, with bounds far beyond any real K3 (the release: 163,840 vocab, hidden
# 7,168, 61 layers, 384 experts) but small enough that nothing derived from them (a layer schedule, a
# parameter count, an allocation) can exhaust memory. Checked before anything is built from them.
SIZE_BOUNDS = {
    "vocab_size": (1, 1 << 22), "hidden_size": (1, 1 << 16), "num_hidden_layers": (1, 1024),
    "intermediate_size": (1, 1 << 20), "num_attention_heads": (0, 4096), "num_key_value_heads": (0, 4096),
    "q_lora_rank": (1, 1 << 16), "kv_lora_rank": (1, 1 << 16), "qk_nope_head_dim": (0, 4096),
    "qk_rope_head_dim": (0, 4096), "v_head_dim": (1, 4096), "attn_res_block_size": (1, 1024),
    "num_experts": (0, 1 << 16), "num_experts_per_token": (1, 1 << 16), "num_shared_experts": (0, 64),
    "moe_intermediate_size": (0, 1 << 20), "routed_expert_hidden_size": (1, 1 << 16),
    "first_k_dense_replace": (0, 1024), "moe_layer_freq": (1, 1024), "max_position_embeddings": (1, 1 << 26),
    "bos_token_id": (0, 1 << 22), "eos_token_id": (0, 1 << 22), "pad_token_id": (0, 1 << 22),
}
LINEAR_BOUNDS = {"num_heads": (1, 4096), "head_dim": (1, 4096), "short_conv_kernel_size": (1, 64)}
# Real numbers: (lowest, highest, whether null is allowed). JSON's Infinity and NaN are never in range.
FLOAT_BOUNDS = {
    "rms_norm_eps": (1e-30, 1.0, False), "activation_situ_beta": (1e-6, 1e6, True),
    "activation_situ_linear_beta": (-1e6, 1e6, True), "routed_scaling_factor": (1e-6, 1e6, False),
    "rope_theta": (1e-6, 1e12, True),
}
LINEAR_FLOAT_BOUNDS = {"gate_lower_bound": (-1e6, 1e6, True)}
FLAGS = ("tie_word_embeddings", "mla_use_output_gate", "mla_use_nope", "latent_moe_use_norm", "moe_renormalize",
         "use_grouped_topk")
LINEAR_FLAGS = ("use_full_rank_gate",)
NAMES = ("hidden_act", "moe_router_activation_func")
EXTRA_INTS = {"num_expert_group": (0, 1 << 16)}


def check_sizes(text: dict) -> None:
    """Integer sizes within SIZE_BOUNDS (null allowed where a default applies); a ConfigError naming the key."""
    for table, where in ((SIZE_BOUNDS, text), (LINEAR_BOUNDS, text.get("linear_attn_config") or {})):
        if not isinstance(where, dict):
            raise ConfigError("config key 'linear_attn_config': expected an object")
        prefix = "" if table is SIZE_BOUNDS else "linear_attn_config."
        for key, (lo, hi) in table.items():
            v = where.get(key)
            if v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool):
                raise ConfigError(f"config key '{prefix}{key}': expected an integer, got {v!r}")
            if not lo <= v <= hi:
                raise ConfigError(f"config key '{prefix}{key}': {v:,} is outside {lo:,}..{hi:,}; this is not a "
                                  "K3 checkpoint's config (re-download config.json)")
    for key in ("kda_layers", "full_attn_layers"):
        layers = (text.get("linear_attn_config") or {}).get(key)
        if layers is not None and (not isinstance(layers, list) or len(layers) > SIZE_BOUNDS["num_hidden_layers"][1]):
            raise ConfigError(f"config key 'linear_attn_config.{key}': expected a list of at most "
                              f"{SIZE_BOUNDS['num_hidden_layers'][1]} layer numbers")


def check_fields(text: dict) -> None:
    """Every field's type and range (sizes, numbers, flags, names); a ConfigError naming the first bad key."""
    check_sizes(text)
    lac = text.get("linear_attn_config") or {}
    for table, where, prefix in ((FLOAT_BOUNDS, text, ""), (LINEAR_FLOAT_BOUNDS, lac, "linear_attn_config.")):
        for key, (lo, hi, nullable) in table.items():
            if key not in where or (where[key] is None and nullable):
                continue
            v = where[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"config key '{prefix}{key}': expected a number, got {v!r}")
            if not lo <= v <= hi:   # also false for inf and nan
                raise ConfigError(f"config key '{prefix}{key}': {v!r} is outside {lo:g}..{hi:g}; re-download "
                                  "config.json")
    for keys, where, prefix in ((FLAGS, text, ""), (LINEAR_FLAGS, lac, "linear_attn_config.")):
        for key in keys:
            if where.get(key) is not None and not isinstance(where[key], bool):
                raise ConfigError(f"config key '{prefix}{key}': expected true or false, got {where[key]!r}")
    for key in NAMES:
        if text.get(key) is not None and not isinstance(text[key], str):
            raise ConfigError(f"config key '{key}': expected a string, got {text[key]!r}")
    for key, (lo, hi) in EXTRA_INTS.items():
        v = text.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi):
            raise ConfigError(f"config key '{key}': expected an integer in {lo}..{hi}, got {v!r}")
