"""K3Config: the typed, validated description of one K3-architecture model (the text model, and the
vision tower when the checkpoint has one).

Stdlib only (no torch). Every per-layer choice is spelled out (`layer_types`, `mlp_types`) so
no other module re-derives the schedule. Checkpoint key names are mapped in `config.hf`, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from k3.config.errors import ConfigError   # raised here; also imported from here by many
from k3.config.vision import VisionConfig

LAYER_KDA = "kda"
LAYER_MLA = "mla"
MLP_DENSE = "dense"
MLP_MOE = "moe"
ACTIVATIONS = ("situ", "silu")
EXPERT_FORMATS = (None, "mxfp4")
TRUNK_FORMATS = (None, "int8")   # None: the trunk as released (bf16); int8: k3 quantize --trunk int8
INT8_GROUP = 32                  # inputs per bf16 scale of an int8 trunk row (k3.ops.int8.format.GROUP is this)


@dataclass(frozen=True)
class K3Config:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    layer_types: tuple[str, ...]
    mlp_types: tuple[str, ...]
    intermediate_size: int
    rms_norm_eps: float = 1e-5
    hidden_act: str = "situ"
    situ_beta: float = 4.0
    situ_linear_beta: float | None = 25.0
    tie_word_embeddings: bool = False
    # Block Attention Residuals; None = plain pre-norm residual stream.
    attn_res_block_size: int | None = 12
    # Gated MLA (NoPE).
    num_attention_heads: int = 96
    q_lora_rank: int | None = 1536
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    mla_use_output_gate: bool = True
    mla_norm_eps: float = 1e-6
    # KDA.
    kda_num_heads: int = 96
    kda_head_dim: int = 128
    short_conv_kernel_size: int = 4
    use_full_rank_gate: bool = True
    gate_lower_bound: float | None = -5.0
    # MoE.
    num_experts: int = 0
    num_experts_per_token: int = 1
    num_shared_experts: int = 0
    moe_intermediate_size: int = 0
    routed_expert_hidden_size: int | None = None
    latent_moe_use_norm: bool = True
    moe_renormalize: bool = True
    routed_scaling_factor: float = 1.0
    expert_format: str | None = "mxfp4"
    mxfp4_group_size: int = 32
    trunk_format: str | None = None
    max_position_embeddings: int = 1048576    # a limit only (NoPE: no rotary table)
    # Tokens.
    bos_token_id: int | None = 163584
    eos_token_id: int | None = 163586
    pad_token_id: int | None = 163839
    # The vision tower and projector (k3.config.vision); None for a text-only checkpoint.
    vision: VisionConfig | None = None
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def kda_proj_dim(self) -> int:
        return self.kda_num_heads * self.kda_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def expert_in_dim(self) -> int:
        """Width the routed experts read and write: the latent when latent MoE is on."""
        return self.routed_expert_hidden_size or self.hidden_size

    @property
    def mla_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == LAYER_MLA)

    @property
    def kda_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == LAYER_KDA)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.mlp_types) if t == MLP_MOE)

    def is_block_start(self, layer: int) -> bool:
        """AttnRes banks the raw layer input at layers 0, S, 2S, ..."""
        return self.attn_res_block_size is not None and layer % self.attn_res_block_size == 0

    def replace(self, **changes) -> "K3Config":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return K3Config(**values)


def _require(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"config key '{key}': {msg}")


def _validate(c: K3Config) -> None:
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size"):
        _require(int(getattr(c, key)) > 0, key, f"must be a positive integer, got {getattr(c, key)!r}")
    n = c.num_hidden_layers
    _require(len(c.layer_types) == n, "linear_attn_config",
             f"the layer schedule has {len(c.layer_types)} entries for num_hidden_layers={n}")
    _require(set(c.layer_types) <= {LAYER_KDA, LAYER_MLA}, "linear_attn_config",
             f"layer types must be 'kda' or 'mla', got {sorted(set(c.layer_types))}")
    _require(len(c.mlp_types) == n and set(c.mlp_types) <= {MLP_DENSE, MLP_MOE}, "first_k_dense_replace",
             "the MLP schedule must give 'dense' or 'moe' for every layer")
    _require(c.hidden_act in ACTIVATIONS, "hidden_act", f"{c.hidden_act!r} is not supported; use one of {ACTIVATIONS}")
    _require(c.rms_norm_eps > 0, "rms_norm_eps", "must be > 0")
    _require(c.situ_beta > 0, "activation_situ_beta", "must be > 0")
    _require(c.situ_linear_beta is None or c.situ_linear_beta > 0, "activation_situ_linear_beta", "must be > 0 or null")
    if c.attn_res_block_size is not None:
        _require(c.attn_res_block_size >= 1, "attn_res_block_size", "must be >= 1 or null (plain residual)")
    if LAYER_KDA in c.layer_types:
        _validate_kda(c)
    if LAYER_MLA in c.layer_types:
        _validate_mla(c)
    if MLP_MOE in c.mlp_types:
        _validate_moe(c)
    _require(tensor_count(c) <= MAX_TENSORS, "num_experts",
             f"num_hidden_layers={c.num_hidden_layers} with num_experts={c.num_experts} implies about "
             f"{tensor_count(c):,} tensors, more than any K3 checkpoint ({MAX_TENSORS:,} at most)")
    _require(c.trunk_format in TRUNK_FORMATS, "quantization_config",
             f"trunk format {c.trunk_format!r} is not supported; k3 reads bf16 or int8 (int-quantized) trunks")
    if c.vision is not None:
        _require(c.vision.text_hidden_size == c.hidden_size, "vision_config.text_hidden_size",
                 f"the projector writes {c.vision.text_hidden_size}-wide rows into a {c.hidden_size}-wide text model")
        _require(0 <= c.vision.media_pad_id < c.vocab_size, "media_placeholder_token_id",
                 f"{c.vision.media_pad_id} is outside the vocabulary of {c.vocab_size}")
    _require(c.expert_format in EXPERT_FORMATS, "quantization_config",
             f"expert format {c.expert_format!r} is not supported; k3 reads MXFP4 (mxfp4-pack-quantized) or unquantized experts")


def _validate_kda(c: K3Config) -> None:
    _require(c.kda_num_heads > 0 and c.kda_head_dim > 0, "linear_attn_config.num_heads",
             "KDA layers need num_heads > 0 and head_dim > 0")
    _require(c.short_conv_kernel_size >= 1, "linear_attn_config.short_conv_kernel_size", "must be >= 1")
    if c.gate_lower_bound is not None:
        _require(c.gate_lower_bound < 0, "linear_attn_config.gate_lower_bound",
                 f"must be negative (decay gate spans (lower_bound, 0)), got {c.gate_lower_bound}")


def _validate_mla(c: K3Config) -> None:
    _require(c.num_attention_heads > 0, "num_attention_heads", "MLA layers need num_attention_heads > 0")
    for key in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
        _require(int(getattr(c, key) or 0) > 0, key, "required by MLA layers (must be > 0)")
    _require(c.qk_rope_head_dim >= 0, "qk_rope_head_dim", "must be >= 0")
    _require(c.q_lora_rank is None or c.q_lora_rank > 0, "q_lora_rank", "must be > 0 or null")


MAX_TENSORS = 1_500_000    # the release has about 500,000; a layout past this is not a K3 checkpoint


def tensor_count(c: K3Config) -> int:
    """An upper bound on the checkpoint tensors `c` implies, computed without listing them."""
    per_expert = 6 if c.expert_format == "mxfp4" else 3
    return 8 + c.num_hidden_layers * 32 + len(c.moe_layers) * c.num_experts * per_expert


def _validate_moe(c: K3Config) -> None:
    _require(c.num_experts > 0, "num_experts", "MoE layers need num_experts > 0")
    _require(0 < c.num_experts_per_token <= c.num_experts, "num_experts_per_token",
             f"must be in 1..num_experts={c.num_experts}, got {c.num_experts_per_token}")
    _require(c.moe_intermediate_size > 0, "moe_intermediate_size", "MoE layers need moe_intermediate_size > 0")
    _require(c.num_shared_experts >= 0, "num_shared_experts", "must be >= 0")
    if c.routed_expert_hidden_size is not None:
        _require(c.routed_expert_hidden_size > 0, "routed_expert_hidden_size", "must be > 0 or null")
    if c.expert_format == "mxfp4":
        g = c.mxfp4_group_size
        for key, width in (("routed_expert_hidden_size", c.expert_in_dim),
                           ("moe_intermediate_size", c.moe_intermediate_size)):
            _require(width % g == 0, key, f"MXFP4 experts need widths divisible by the group size {g}, got {width}")
