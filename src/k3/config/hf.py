"""Read a Hugging Face `config.json` (K3's `kimi_k3` wrapper or a bare `kimi_linear` text config).

This is the only place checkpoint config keys are renamed or re-indexed (1-based layer lists
become the 0-based `layer_types` schedule). Everything it does not understand fails with a
`ConfigError` naming the key.
"""

from __future__ import annotations

import json
from pathlib import Path

from k3.config.bounds import check_fields
from k3.config.model import LAYER_KDA, LAYER_MLA, MLP_DENSE, MLP_MOE, ConfigError, K3Config
from k3.config.quant import quant_fields, quantization_config
from k3.config.vision import vision_from_hf, vision_to_hf

SUPPORTED_MODEL_TYPES = ("kimi_k3", "kimi_linear")


def load_config(path: str | Path) -> K3Config:
    """`path` is a checkpoint directory or a config.json file."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"no config.json at {p}: point k3 at a checkpoint directory or a config.json file")
    _refuse_other_formats(p)
    try:
        raw = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p} is not valid JSON ({e}); re-download config.json") from None
    except RecursionError:
        raise ConfigError(f"{p} is JSON nested too deeply to be a config; re-download config.json") from None
    return from_hf_dict(raw)


OTHER_FORMATS = {b"GGUF": "a GGUF file (llama.cpp's format)", b"PK\x03\x04": "a zip archive (a torch .pt/.bin file?)"}


def _refuse_other_formats(p: Path) -> None:
    """A file that is not JSON at all gets a message naming what it is and what k3 reads."""
    with p.open("rb") as f:
        head = f.read(8)
    kind = next((name for magic, name in OTHER_FORMATS.items() if head.startswith(magic)), None)
    if kind is None and p.suffix in (".safetensors", ".gguf", ".bin", ".pt"):
        kind = f"a {p.suffix} file"
    if kind is not None:
        raise ConfigError(f"{p} is {kind}, not a config.json. k3 reads safetensors checkpoints in the official "
                          "layout: give the checkpoint directory (config.json, *.safetensors, tiktoken.model). "
                          "A GGUF conversion runs in llama.cpp (k3 doctor compares the engines)")


def text_config_of(raw: dict) -> tuple[dict, dict | None]:
    """Split a config dict into (text_config, quantization_config)."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json must hold a JSON object")
    model_type = raw.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(f"config key 'model_type': {model_type!r} is not a K3-family model; expected one of {SUPPORTED_MODEL_TYPES}")
    if model_type == "kimi_k3":
        text = raw.get("text_config")
        if not isinstance(text, dict):
            raise ConfigError("config key 'text_config': a kimi_k3 config must nest the text model under 'text_config'")
    else:
        text = raw
    quant = text.get("quantization_config") or raw.get("quantization_config")
    return text, quant


def from_hf_dict(raw: dict) -> K3Config:
    text, quant = text_config_of(raw)
    check_fields(text)
    n = _int(text, "num_hidden_layers")
    known = dict(
        vocab_size=_int(text, "vocab_size"),
        hidden_size=_int(text, "hidden_size"),
        num_hidden_layers=n,
        layer_types=_layer_types(text, n),
        mlp_types=_mlp_types(text, n),
        intermediate_size=_int(text, "intermediate_size"),
        max_position_embeddings=text.get("max_position_embeddings", 1048576),
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-5)),
        hidden_act=text.get("hidden_act", "situ"),
        situ_beta=float(text.get("activation_situ_beta") or 1.0),
        situ_linear_beta=_opt_float(text.get("activation_situ_linear_beta")),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))),
        attn_res_block_size=text.get("attn_res_block_size"),
        bos_token_id=text.get("bos_token_id"),
        eos_token_id=text.get("eos_token_id", raw.get("eos_token_id")),
        pad_token_id=text.get("pad_token_id"),
    )
    known.update(_mla_fields(text))
    known.update(_kda_fields(text))
    known.update(_moe_fields(text))
    known.update(quant_fields(quant))
    if raw.get("model_type") == "kimi_k3":
        known["vision"] = vision_from_hf(raw.get("vision_config") or {}, raw.get("media_placeholder_token_id"),
                                         known["hidden_size"])
    return K3Config(**known, extra={"hf": raw})


def _int(d: dict, key: str) -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ConfigError(f"config key '{key}': expected an integer, got {v!r}")
    return v


def _opt_float(v) -> float | None:
    return None if v is None else float(v)


def _layer_types(text: dict, n: int) -> tuple[str, ...]:
    lac = text.get("linear_attn_config")
    if lac is None:
        return (LAYER_MLA,) * n
    kda = lac.get("kda_layers") or []
    full = lac.get("full_attn_layers") or []
    for key, layers in (("kda_layers", kda), ("full_attn_layers", full)):
        bad = [x for x in layers if not isinstance(x, int) or not 1 <= x <= n]
        if bad:
            raise ConfigError(f"config key 'linear_attn_config.{key}': layer numbers are 1-based in 1..{n}, got {bad}")
    both = sorted(set(kda) & set(full))
    if both:
        raise ConfigError(f"config key 'linear_attn_config': layers {both} are listed as both KDA and full attention")
    missing = sorted(set(range(1, n + 1)) - set(kda) - set(full))
    if missing and kda and full:
        raise ConfigError(f"config key 'linear_attn_config': layers {missing} are in neither kda_layers nor full_attn_layers")
    kda_set = set(kda) if kda else set(range(1, n + 1)) - set(full)
    return tuple(LAYER_KDA if i + 1 in kda_set else LAYER_MLA for i in range(n))


def _mlp_types(text: dict, n: int) -> tuple[str, ...]:
    if not text.get("num_experts"):
        return (MLP_DENSE,) * n
    k = int(text.get("first_k_dense_replace", 0))
    freq = int(text.get("moe_layer_freq", 1))
    if k < 0 or freq < 1:
        raise ConfigError("config keys 'first_k_dense_replace'/'moe_layer_freq': need >= 0 and >= 1")
    return tuple(MLP_MOE if i >= k and i % freq == 0 else MLP_DENSE for i in range(n))


def _mla_fields(text: dict) -> dict:
    if text.get("mla_use_nope") is False:
        raise ConfigError("config key 'mla_use_nope': false (rotary MLA) is not a K3 model; k3 implements NoPE MLA only")
    out = dict(
        num_attention_heads=text.get("num_attention_heads", 0),
        q_lora_rank=text.get("q_lora_rank"),
        mla_use_output_gate=bool(text.get("mla_use_output_gate", False)),
    )
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if text.get(key) is not None:
            out[key] = text[key]
    return out


def _kda_fields(text: dict) -> dict:
    lac = text.get("linear_attn_config")
    if lac is None:
        return {}
    return dict(
        kda_num_heads=int(lac.get("num_heads", text.get("num_attention_heads", 0))),
        kda_head_dim=int(lac.get("head_dim", 0)),
        short_conv_kernel_size=int(lac.get("short_conv_kernel_size", 4)),
        use_full_rank_gate=bool(lac.get("use_full_rank_gate", False)),
        gate_lower_bound=_opt_float(lac.get("gate_lower_bound")),
    )


def _moe_fields(text: dict) -> dict:
    if not text.get("num_experts"):
        return {}
    act = text.get("moe_router_activation_func", "sigmoid")
    if act != "sigmoid":
        raise ConfigError(f"config key 'moe_router_activation_func': {act!r} is not supported; K3 uses 'sigmoid'")
    if text.get("use_grouped_topk") and int(text.get("num_expert_group") or 1) > 1:
        raise ConfigError("config key 'num_expert_group': grouped top-k with more than one group is not supported (K3 uses 1)")
    return dict(
        num_experts=int(text["num_experts"]),
        num_experts_per_token=int(text.get("num_experts_per_token", 1)),
        num_shared_experts=int(text.get("num_shared_experts") or 0),
        moe_intermediate_size=int(text.get("moe_intermediate_size") or 0),
        routed_expert_hidden_size=text.get("routed_expert_hidden_size"),
        latent_moe_use_norm=bool(text.get("latent_moe_use_norm", False)),
        moe_renormalize=bool(text.get("moe_renormalize", True)),
        routed_scaling_factor=float(text.get("routed_scaling_factor", 1.0)),
    )


def to_hf_dict(c: K3Config, *, wrapped: bool = True) -> dict:
    """The official config.json for `c`: a `kimi_k3` wrapper with a nested `text_config`."""
    kda_layers = [i + 1 for i in c.kda_layers]
    text = {
        "model_type": "kimi_linear",
        "architectures": ["KimiLinearForCausalLM"],
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_attention_heads,
        "intermediate_size": c.intermediate_size,
        "hidden_act": c.hidden_act,
        "activation_situ_beta": c.situ_beta,
        "activation_situ_linear_beta": c.situ_linear_beta,
        "rms_norm_eps": c.rms_norm_eps,
        "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": c.tie_word_embeddings,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "pad_token_id": c.pad_token_id,
        "dtype": "bfloat16",
        "q_lora_rank": c.q_lora_rank,
        "kv_lora_rank": c.kv_lora_rank,
        "qk_nope_head_dim": c.qk_nope_head_dim,
        "qk_rope_head_dim": c.qk_rope_head_dim,
        "v_head_dim": c.v_head_dim,
        "mla_use_nope": True,
        "mla_use_output_gate": c.mla_use_output_gate,
        "attn_res_block_size": c.attn_res_block_size,
        "num_nextn_predict_layers": 0,
        "linear_attn_config": {
            "full_attn_layers": [i + 1 for i in c.mla_layers],
            "kda_layers": kda_layers,
            "num_heads": c.kda_num_heads,
            "head_dim": c.kda_head_dim,
            "short_conv_kernel_size": c.short_conv_kernel_size,
            "use_full_rank_gate": c.use_full_rank_gate,
            "gate_lower_bound": c.gate_lower_bound,
        },
    }
    text.update(_moe_hf(c))
    quant = quantization_config(c)
    if quant is not None:
        text["quantization_config"] = quant
    if not wrapped:
        return text
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "dtype": "bfloat16",
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "pad_token_id": c.pad_token_id,
        "tie_word_embeddings": c.tie_word_embeddings,
        "text_config": text,
        "vision_config": vision_to_hf(c.vision) if c.vision is not None else {},
        **({"media_placeholder_token_id": c.vision.media_pad_id} if c.vision is not None else {}),
    }


def _moe_hf(c: K3Config) -> dict:
    if not c.moe_layers:
        return {}
    first_moe = c.moe_layers[0]
    if c.moe_layers != tuple(range(first_moe, c.num_hidden_layers)):
        raise ConfigError("config key 'first_k_dense_replace': the official format needs MoE on every layer from the first MoE layer on")
    return {
        "num_experts": c.num_experts,
        "num_experts_per_token": c.num_experts_per_token,
        "num_shared_experts": c.num_shared_experts,
        "moe_intermediate_size": c.moe_intermediate_size,
        "routed_expert_hidden_size": c.routed_expert_hidden_size,
        "latent_moe_use_norm": c.latent_moe_use_norm,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": c.moe_renormalize,
        "routed_scaling_factor": c.routed_scaling_factor,
        "topk_method": "noaux_tc",
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": first_moe,
        "moe_layer_freq": 1,
    }
