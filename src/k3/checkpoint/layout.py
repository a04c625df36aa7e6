"""The official checkpoint layout implied by a config: every text tensor's name, shape and dtype.

One source of truth for the test-checkpoint writer, the loader's checks, `k3 inspect` and
`k3 verify`. Names are relative to the text model (the `language_model.` prefix is added by
`names.py`). Shapes are HF `[out, in]`; MXFP4 weights appear as their packed U8 pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3.checkpoint.header import DTYPE_SIZES
from k3.config.model import INT8_GROUP, LAYER_KDA, MLP_MOE, K3Config

# Safetensors dtypes k3 reads as floating point weights (converted by the loader's dtype rules).
FLOAT_DTYPES = ("BF16", "F16", "F32", "F64")
EXPERT_MATS = ("w1", "w3", "w2")
# Trunk matrices an int8 trunk keeps bf16: the router (its scores pick the experts) and MLA's kv_b_proj
# (absorbed decode multiplies its per-head halves with bf16_head_linear).
INT8_KEEP = (".block_sparse_moe.gate.weight", ".kv_b_proj.weight")


@dataclass(frozen=True)
class ExpectedTensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    # Logical parameters held (2 per packed MXFP4 byte; 0 for scales).
    params: int
    expert: int | None = None

    @property
    def nbytes(self) -> int:
        n = DTYPE_SIZES[self.dtype]
        for d in self.shape:
            n *= d
        return n


def _t(name: str, shape: tuple[int, ...], dtype: str = "BF16", expert: int | None = None) -> ExpectedTensor:
    n = 1
    for d in shape:
        n *= d
    return ExpectedTensor(name, tuple(shape), dtype, n, expert)


def a_log_stored_len(c: K3Config) -> int:
    """K3 pads A_log to head_dim (128 for 96 heads); only the first num_heads entries are used."""
    return max(c.kda_num_heads, c.kda_head_dim)


def expected_tensors(c: K3Config) -> list[ExpectedTensor]:
    """Every tensor the text model's checkpoint holds (about 3 million for K3: its experts' are listed one
    by one, some 160 MB of objects, so nothing here keeps them; the planner keeps its small sums)."""
    specs = [_t("model.embed_tokens.weight", (c.vocab_size, c.hidden_size)),
             _t("model.norm.weight", (c.hidden_size,))]
    if c.attn_res_block_size is not None:
        specs += _attn_res("model.output_attn_res", c)
    if not c.tie_word_embeddings:
        specs.append(_t("lm_head.weight", (c.vocab_size, c.hidden_size)))
    for i in range(c.num_hidden_layers):
        specs += layer_tensors(c, i)
    return specs


def layer_tensors(c: K3Config, i: int) -> list[ExpectedTensor]:
    p = f"model.layers.{i}."
    h = c.hidden_size
    specs = [_t(p + "input_layernorm.weight", (h,)), _t(p + "post_attention_layernorm.weight", (h,))]
    if c.attn_res_block_size is not None:
        specs += _attn_res(p + "self_attention_res", c) + _attn_res(p + "mlp_res", c)
    attn = _kda(c, p + "self_attn.") if c.layer_types[i] == LAYER_KDA else _mla(c, p + "self_attn.")
    ffn = _moe(c, p + "block_sparse_moe.") if c.mlp_types[i] == MLP_MOE else _glu(p + "mlp.", h, c.intermediate_size)
    specs += attn + ffn
    if c.trunk_format == "int8":
        specs = [t for spec in specs for t in (int8_pair(spec) if int8_target(spec) else [spec])]
    return specs


def int8_target(spec: ExpectedTensor) -> bool:
    """Whether an int8 trunk quantises `spec` (as released): a layer's bf16 projection matrix of more than
    one row (not an expert, the router, kv_b_proj, or a one-row AttnRes query)."""
    return (spec.name.startswith("model.layers.") and spec.expert is None and spec.dtype == "BF16"
            and len(spec.shape) == 2 and spec.shape[0] > 1 and spec.name.endswith(".weight")
            and not spec.name.endswith(INT8_KEEP))


def int8_pair(spec: ExpectedTensor) -> list[ExpectedTensor]:
    """A quantised matrix as an int8 trunk stores it: `<name>` I8 [out, in] and `<name>_scale` BF16 [out, ceil(in / 32)]."""
    out, inp = spec.shape
    return [ExpectedTensor(spec.name, spec.shape, "I8", spec.params),
            ExpectedTensor(spec.name + "_scale", (out, -(-inp // INT8_GROUP)), "BF16", 0)]


def _attn_res(prefix: str, c: K3Config) -> list[ExpectedTensor]:
    return [_t(prefix + "_norm.weight", (c.hidden_size,)), _t(prefix + "_proj.weight", (1, c.hidden_size))]


def _glu(prefix: str, h: int, inter: int) -> list[ExpectedTensor]:
    return [_t(prefix + "gate_proj.weight", (inter, h)), _t(prefix + "up_proj.weight", (inter, h)),
            _t(prefix + "down_proj.weight", (h, inter))]


def _kda(c: K3Config, p: str) -> list[ExpectedTensor]:
    h, P, D, K = c.hidden_size, c.kda_proj_dim, c.kda_head_dim, c.short_conv_kernel_size
    specs = [_t(p + f"{x}_proj.weight", (P, h)) for x in "qkv"]
    specs += [_t(p + f"{x}_conv1d.weight", (P, 1, K), "F32") for x in "qkv"]
    specs += [_t(p + "f_a_proj.weight", (D, h)), _t(p + "f_b_proj.weight", (P, D)),
              _t(p + "b_proj.weight", (c.kda_num_heads, h)),
              _t(p + "A_log", (a_log_stored_len(c),), "F32"), _t(p + "dt_bias", (P,), "F32")]
    if c.use_full_rank_gate:
        specs.append(_t(p + "g_proj.weight", (P, h)))
    else:
        specs += [_t(p + "g_a_proj.weight", (D, h)), _t(p + "g_b_proj.weight", (P, D))]
    return specs + [_t(p + "o_norm.weight", (D,), "F32"), _t(p + "o_proj.weight", (h, P))]


def _mla(c: K3Config, p: str) -> list[ExpectedTensor]:
    h, H = c.hidden_size, c.num_attention_heads
    if c.q_lora_rank:
        specs = [_t(p + "q_a_proj.weight", (c.q_lora_rank, h)), _t(p + "q_a_layernorm.weight", (c.q_lora_rank,)),
                 _t(p + "q_b_proj.weight", (H * c.qk_head_dim, c.q_lora_rank))]
    else:
        specs = [_t(p + "q_proj.weight", (H * c.qk_head_dim, h))]
    specs += [_t(p + "kv_a_proj_with_mqa.weight", (c.kv_lora_rank + c.qk_rope_head_dim, h)),
              _t(p + "kv_a_layernorm.weight", (c.kv_lora_rank,)),
              _t(p + "kv_b_proj.weight", (H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank))]
    if c.mla_use_output_gate:
        specs.append(_t(p + "g_proj.weight", (H * c.v_head_dim, h)))
    return specs + [_t(p + "o_proj.weight", (h, H * c.v_head_dim))]


def _moe(c: K3Config, p: str) -> list[ExpectedTensor]:
    h, E = c.hidden_size, c.num_experts
    specs = [_t(p + "gate.weight", (E, h)), _t(p + "gate.e_score_correction_bias", (E,), "F32")]
    r = c.routed_expert_hidden_size
    if r is not None:
        specs.append(_t(p + "routed_expert_down_proj.weight", (r, h)))
        if c.latent_moe_use_norm:
            specs.append(_t(p + "routed_expert_norm.weight", (r,)))
        specs.append(_t(p + "routed_expert_up_proj.weight", (h, r)))
    if c.num_shared_experts:
        specs += _glu(p + "shared_experts.", h, c.moe_intermediate_size * c.num_shared_experts)
    for e in range(E):
        specs += expert_tensors(c, p, e)
    return specs


def expert_mat_shape(c: K3Config, mat: str) -> tuple[int, int]:
    """Logical [out, in] of one expert matrix: w1/w3 read the expert input, w2 writes it."""
    d, inter = c.expert_in_dim, c.moe_intermediate_size
    return (d, inter) if mat == "w2" else (inter, d)


def expert_tensors(c: K3Config, p: str, e: int) -> list[ExpectedTensor]:
    specs = []
    g = c.mxfp4_group_size
    for mat in EXPERT_MATS:
        out, inp = expert_mat_shape(c, mat)
        name = f"{p}experts.{e}.{mat}."
        if c.expert_format == "mxfp4":
            specs.append(ExpectedTensor(name + "weight_packed", (out, inp // 2), "U8", out * inp, e))
            specs.append(ExpectedTensor(name + "weight_scale", (out, inp // g), "U8", 0, e))
        else:
            specs.append(_t(name + "weight", (out, inp), expert=e))
    return specs
