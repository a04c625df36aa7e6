"""Bounds on every size a config.json may give, checked before anything is built from them."""

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
