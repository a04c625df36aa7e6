"""Named presets: the released Kimi K3 text config, and tiny odd-sized configs for tests.

Presets are named functions, never guessed from paths. `released_hf_dict()` is the official
config.json content (spec §1.1) so the released numbers can be checked without a download.
"""

from __future__ import annotations

from k3.config.hf import from_hf_dict
from k3.config.quant import mxfp4_quantization_config
from k3.config.model import LAYER_KDA, LAYER_MLA, MLP_DENSE, MLP_MOE, K3Config
from k3.config.vision import VisionConfig, vision_to_hf

RELEASED_MLA_LAYERS = tuple(range(4, 93, 4)) + (93,)


def released_hf_dict() -> dict:
    """The released `config.json` (text part verbatim in the keys k3 reads; vision_config verbatim)."""
    kda = [i for i in range(1, 94) if i not in RELEASED_MLA_LAYERS]
    text = {
        "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"],
        "vocab_size": 163840, "hidden_size": 7168, "num_hidden_layers": 93,
        "num_attention_heads": 96, "num_key_value_heads": 96, "intermediate_size": 33792,
        "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
        "rms_norm_eps": 1e-05, "max_position_embeddings": 1048576, "tie_word_embeddings": False,
        "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839, "dtype": "bfloat16",
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "mla_use_nope": True, "mla_use_output_gate": True,
        "num_experts": 896, "num_experts_per_token": 16, "num_shared_experts": 2,
        "moe_intermediate_size": 3072, "routed_expert_hidden_size": 3584, "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid", "moe_renormalize": True, "routed_scaling_factor": 1.0,
        "topk_method": "noaux_tc", "use_grouped_topk": True, "num_expert_group": 1, "topk_group": 1,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_nextn_predict_layers": 0,
        "attn_res_block_size": 12,
        "linear_attn_config": {
            "full_attn_layers": list(RELEASED_MLA_LAYERS), "kda_layers": kda, "num_heads": 96,
            "head_dim": 128, "short_conv_kernel_size": 4, "use_full_rank_gate": True,
            "gate_lower_bound": -5.0,
        },
        "quantization_config": mxfp4_quantization_config(32),
    }
    return {
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
        "dtype": "bfloat16", "eos_token_id": 163586, "ignore_index": -100,
        "media_placeholder_token_id": 163605, "tie_word_embeddings": False,
        "text_config": text, "vision_config": vision_to_hf(VisionConfig()),
    }


def released() -> K3Config:
    """Kimi K3 as released (2.78 T text parameters)."""
    return from_hf_dict(released_hf_dict())


def tiny(**changes) -> K3Config:
    """Odd-sized K3 for tests: KDA+MLA, an AttnRes boundary inside the stack, MLA last, MXFP4 experts."""
    base = K3Config(
        vocab_size=101, hidden_size=48, num_hidden_layers=5,
        layer_types=(LAYER_KDA, LAYER_KDA, LAYER_MLA, LAYER_KDA, LAYER_MLA),
        mlp_types=(MLP_DENSE,) + (MLP_MOE,) * 4,
        intermediate_size=37, attn_res_block_size=2,
        num_attention_heads=3, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8,
        qk_rope_head_dim=4, v_head_dim=6,
        kda_num_heads=3, kda_head_dim=8, short_conv_kernel_size=4,
        num_experts=7, num_experts_per_token=3, num_shared_experts=1,
        moe_intermediate_size=32, routed_expert_hidden_size=64,
        bos_token_id=None, eos_token_id=100, pad_token_id=None,
    )
    return base.replace(**changes) if changes else base


def tiny_chat(**changes) -> K3Config:
    """tiny() with a 768-token vocabulary (512 BPE ranks + 256 specials), so it pairs with a tokenizer;
    eos is <|end_of_msg|> (514) as in the release."""
    base = tiny(vocab_size=768, bos_token_id=512, eos_token_id=514, pad_token_id=767)
    return base.replace(**changes) if changes else base


def tiny_vision(text_hidden: int = 48, **changes) -> VisionConfig:
    """An odd-sized tower: 2 blocks, width 40, 3 heads of 16 (qkv 48 != width, as in K3), MLP 72, an 8x8
    position table (so real image grids both shrink and enlarge it), the released patch size."""
    base = VisionConfig(hidden_size=40, num_layers=2, num_heads=3, qkv_size=48, intermediate_size=72,
                        pos_emb_height=8, pos_emb_width=8, text_hidden_size=text_hidden, media_pad_id=512 + 21)
    return base.replace(**changes) if changes else base


def tiny_chat_vision(**changes) -> K3Config:
    """tiny_chat() with tiny_vision(): `<|media_pad|>` is 533 (512 ranks + offset 21), as 163605 is in K3."""
    base = tiny_chat()
    return base.replace(vision=tiny_vision(base.hidden_size), **changes)


def tiny7(**changes) -> K3Config:
    """7 layers, AttnRes block 3, wider heads, 9 experts top-3, routed scaling 2.5, the last two layers MLA."""
    base = tiny(
        num_hidden_layers=7, hidden_size=64, layer_types=("kda", "kda", "kda", "mla", "kda", "mla", "mla"),
        mlp_types=("dense",) + ("moe",) * 6, attn_res_block_size=3, kda_num_heads=2, kda_head_dim=16,
        num_attention_heads=4, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, q_lora_rank=32,
        kv_lora_rank=24, num_experts=9, num_experts_per_token=3, moe_intermediate_size=64,
        routed_expert_hidden_size=32, routed_scaling_factor=2.5, intermediate_size=83, vocab_size=211,
        eos_token_id=210)
    return base.replace(**changes) if changes else base


def prose(**changes) -> K3Config:
    """The default trained model's shape: every K3 component at ~18 M parameters (~8 M active).
    8 layers (6 KDA, 2 MLA, the last MLA), AttnRes block 3, dense layer 0, 16 MXFP4 experts top-2
    in a 128-wide latent plus a shared expert, vocabulary 4096 (3840 BPE ranks + 256 specials)."""
    n = 8
    base = K3Config(
        vocab_size=4096, hidden_size=256, num_hidden_layers=n,
        layer_types=("kda", "kda", "kda", "mla", "kda", "kda", "kda", "mla"),
        mlp_types=(MLP_DENSE,) + (MLP_MOE,) * (n - 1),
        intermediate_size=768, attn_res_block_size=3,
        num_attention_heads=4, q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
        v_head_dim=32, kda_num_heads=4, kda_head_dim=64,
        num_experts=16, num_experts_per_token=2, num_shared_experts=1, moe_intermediate_size=256,
        routed_expert_hidden_size=128, bos_token_id=3840, eos_token_id=3842, pad_token_id=4095)
    return base.replace(**changes) if changes else base


def mid(**changes) -> K3Config:
    """A mid-size random config for throughput measurements (~0.2 B parameters)."""
    n = 8
    base = K3Config(
        vocab_size=32000, hidden_size=1024, num_hidden_layers=n,
        layer_types=tuple(LAYER_MLA if (i + 1) % 4 == 0 else LAYER_KDA for i in range(n)),
        mlp_types=(MLP_DENSE,) + (MLP_MOE,) * (n - 1),
        intermediate_size=2816, attn_res_block_size=3,
        num_attention_heads=8, q_lora_rank=384, kv_lora_rank=128, qk_nope_head_dim=64,
        qk_rope_head_dim=32, v_head_dim=64,
        kda_num_heads=8, kda_head_dim=64,
        num_experts=32, num_experts_per_token=4, num_shared_experts=1,
        moe_intermediate_size=512, routed_expert_hidden_size=512,
    )
    return base.replace(**changes) if changes else base


def prose_drafter(**changes) -> K3Config:
    """A draft model for the default model (speculative decoding): prose's widths and vocabulary in 2
    layers (KDA, then MLA), so it shares the tokenizer; `make drafter` trains it."""
    base = prose(num_hidden_layers=2, layer_types=("kda", "mla"), mlp_types=(MLP_DENSE, MLP_MOE), attn_res_block_size=2)
    return base.replace(**changes) if changes else base


PRESETS = {"k3": released, "tiny": tiny, "tiny-chat": tiny_chat, "tiny-vision": tiny_chat_vision, "tiny7": tiny7, "prose": prose,
           "prose-drafter": prose_drafter, "mid": mid}


def shrink(config: K3Config, layers: int | None = None, experts: int | None = None) -> K3Config:
    """The first `layers` layers of `config` (its schedule kept) and/or `experts` routed experts per layer,
    at full width: how real-dimension checkpoints fit a test or benchmark (`k3 synth --preset k3 --layers 4`)."""
    changes: dict = {}
    if layers is not None:
        if not 1 <= layers <= config.num_hidden_layers:
            raise ValueError(f"--layers must be between 1 and {config.num_hidden_layers}")
        changes |= dict(num_hidden_layers=layers, layer_types=config.layer_types[:layers],
                        mlp_types=config.mlp_types[:layers])
    if experts is not None:
        if experts < 1:
            raise ValueError("--experts must be >= 1")
        changes |= dict(num_experts=experts, num_experts_per_token=min(config.num_experts_per_token, experts))
    return config.replace(**changes) if changes else config
