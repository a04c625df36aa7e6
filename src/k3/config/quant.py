"""`text_config.quantization_config`: what k3 reads from it and writes into it (compressed-tensors).

The release declares one group, MXFP4 experts (mxfp4-pack-quantized). `k3 quantize --trunk int8` adds
an int-quantized group for the trunk's projection matrices, which makes the config compressed-tensors'
mixed-precision form.
"""

from __future__ import annotations

from k3.config.model import INT8_GROUP, ConfigError, K3Config


def quant_fields(quant: dict | None) -> dict:
    """The expert and trunk formats a compressed-tensors config declares: MXFP4 experts (the release's one
    group), and optionally int8 trunk weights (the group `k3 quantize --trunk int8` adds, "mixed-precision")."""
    if not quant:
        return {"expert_format": None}
    method, fmt = quant.get("quant_method"), quant.get("format")
    if method != "compressed-tensors" or fmt not in ("mxfp4-pack-quantized", "mixed-precision"):
        raise ConfigError(
            f"config key 'quantization_config': {method}/{fmt} is not supported; "
            "k3 reads compressed-tensors mxfp4-pack-quantized experts (the official K3 format)")
    out: dict = {"expert_format": None}
    for group in (quant.get("config_groups") or {"group_0": {}}).values():
        weights = group.get("weights") or {}
        if group.get("format", fmt) == "int-quantized":
            if weights.get("num_bits") != 8 or weights.get("type") != "int" or weights.get("group_size") != INT8_GROUP:
                raise ConfigError("config key 'quantization_config.config_groups': int-quantized trunk weights must be "
                                  f"8-bit int with group_size {INT8_GROUP} (as k3 quantize --trunk int8 writes them)")
            out["trunk_format"] = "int8"
            continue
        if weights and (weights.get("num_bits") != 4 or weights.get("type") != "float"):
            raise ConfigError("config key 'quantization_config.config_groups': expected 4-bit float (E2M1) weights")
        out.update(expert_format="mxfp4", mxfp4_group_size=int(weights.get("group_size", 32)))
    return out


# The trunk matrices an int8 trunk quantises (k3.checkpoint.layout.int8_target decides; these say the
# same to compressed-tensors readers). The router and MLA's kv_b_proj stay bf16.
INT8_TARGETS = ("re:.*self_attn\\.(q|k|v|g|f_a|f_b|b|g_a|g_b|o|q_a|q_b)_proj$", "re:.*self_attn\\.kv_a_proj_with_mqa$",
                "re:.*mlp\\.(gate|up|down)_proj$", "re:.*shared_experts\\.(gate|up|down)_proj$",
                "re:.*routed_expert_(down|up)_proj$")


def quantization_config(c: K3Config) -> dict | None:
    """`text_config.quantization_config` for `c`: the release's (MXFP4 experts); with an int8 trunk, a
    second int-quantized group (compressed-tensors' mixed-precision form, the experts' group targeting
    the experts alone, and only what stays bf16 ignored); None for an unquantized checkpoint."""
    experts = c.expert_format == "mxfp4" and bool(c.moe_layers)
    if not experts and c.trunk_format is None:
        return None
    quant = mxfp4_quantization_config(c.mxfp4_group_size)
    if c.trunk_format != "int8":
        return quant
    groups = {"group_0": dict(quant["config_groups"]["group_0"], targets=["re:.*experts\\.\\d+\\.w[123]$"])} if experts else {}
    groups["group_1"] = {
        "format": "int-quantized", "targets": list(INT8_TARGETS), "input_activations": None, "output_activations": None,
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "group", "group_size": INT8_GROUP,
                    "dynamic": False, "observer": "minmax", "observer_kwargs": {}, "actorder": None,
                    "block_structure": None, "zp_dtype": None}}
    ignore = ["re:.*block_sparse_moe\\.gate$", "re:.*kv_b_proj$", "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"]
    return dict(quant, format="mixed-precision", config_groups=groups, ignore=ignore)


def mxfp4_quantization_config(group_size: int = 32) -> dict:
    """`text_config.quantization_config` exactly as the release writes it (spec §3.1)."""
    return {
        "quant_method": "compressed-tensors",
        "format": "mxfp4-pack-quantized",
        "quantization_status": "compressed",
        "global_compression_ratio": None,
        "kv_cache_scheme": None,
        "config_groups": {"group_0": {
            "format": "mxfp4-pack-quantized",
            "targets": ["Linear"],
            "input_activations": None,
            "output_activations": None,
            "weights": {
                "num_bits": 4, "type": "float", "symmetric": True, "strategy": "group",
                "group_size": group_size, "dynamic": False, "scale_dtype": "torch.uint8",
                "observer": "minmax", "observer_kwargs": {}, "actorder": None,
                "block_structure": None, "zp_dtype": None,
            },
        }},
        "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                   "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"],
    }
