"""What a K3 config or checkpoint costs: layer schedule, parameters (total and active per token),
bytes on disk, expert bytes read per token, KDA state per sequence, MLA cache per token.

Works from the config alone (no weights are read), so the released model can be sized here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from k3.checkpoint.layout import expected_tensors
from k3.config import K3Config
from k3.config.model import LAYER_KDA, MLP_MOE
from k3.layers.state import kda_state_bytes, mla_cache_bytes_per_token


@dataclass(frozen=True)
class Summary:
    layer_schedule: str
    mlp_schedule: str
    attn_res_block_starts: list[int]
    params_total: int
    params_active_per_token: int
    params_routed_experts: int
    bytes_tensors: int
    bytes_on_disk: int | None
    bytes_per_expert: int
    expert_bytes_per_token: int
    kda_recurrent_bytes_per_seq: int
    kda_conv_bytes_per_seq: int
    mla_cache_bytes_per_token: int

    @property
    def kda_state_bytes_per_seq(self) -> int:
        return self.kda_recurrent_bytes_per_seq + self.kda_conv_bytes_per_seq

    def to_dict(self) -> dict:
        return asdict(self) | {"kda_state_bytes_per_seq": self.kda_state_bytes_per_seq}


def summarize(c: K3Config, checkpoint_dir: str | Path | None = None) -> Summary:
    specs = expected_tensors(c)
    expert_specs = [s for s in specs if s.expert is not None]
    expert_params = sum(s.params for s in expert_specs)
    embed = next(s.params for s in specs if s.name == "model.embed_tokens.weight")
    total = sum(s.params for s in specs)
    n_moe = len(c.moe_layers)
    per_expert_params = expert_params // (n_moe * c.num_experts) if n_moe else 0
    per_expert_bytes = sum(s.nbytes for s in expert_specs) // (n_moe * c.num_experts) if n_moe else 0
    top_k = c.num_experts_per_token if n_moe else 0
    recurrent, conv = kda_state_bytes(c)
    return Summary(
        layer_schedule="".join("K" if t == LAYER_KDA else "M" for t in c.layer_types),
        mlp_schedule="".join("E" if t == MLP_MOE else "D" for t in c.mlp_types),
        attn_res_block_starts=[i for i in range(c.num_hidden_layers) if c.is_block_start(i)],
        params_total=total,
        # Embedding rows are looked up, not multiplied: not active (the model card's convention).
        params_active_per_token=total - expert_params - embed + n_moe * top_k * per_expert_params,
        params_routed_experts=expert_params,
        bytes_tensors=sum(s.nbytes for s in specs),
        bytes_on_disk=_disk_bytes(checkpoint_dir),
        bytes_per_expert=per_expert_bytes,
        expert_bytes_per_token=n_moe * top_k * per_expert_bytes,
        kda_recurrent_bytes_per_seq=recurrent,
        kda_conv_bytes_per_seq=conv,
        mla_cache_bytes_per_token=mla_cache_bytes_per_token(c),
    )


def _disk_bytes(checkpoint_dir) -> int | None:
    if checkpoint_dir is None:
        return None
    return sum(p.stat().st_size for p in Path(checkpoint_dir).glob("*.safetensors"))


def _runs(schedule: str) -> str:
    """'KKKMKKKM' -> 'K×3 M K×3 M' (run-length, readable for 93 layers)."""
    out, i = [], 0
    while i < len(schedule):
        j = i
        while j < len(schedule) and schedule[j] == schedule[i]:
            j += 1
        out.append(schedule[i] if j - i == 1 else f"{schedule[i]}×{j - i}")
        i = j
    return " ".join(out)


def _human(n: int) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return str(n)


def format_summary(name: str, c: K3Config, s: Summary) -> str:
    rows = [
        ("model", name),
        ("layers", f"{c.num_hidden_layers} ({len(c.kda_layers)} KDA, {len(c.mla_layers)} MLA; "
                   f"MLA at 0-based {list(c.mla_layers)})"),
        ("attention (K=KDA, M=MLA)", _runs(s.layer_schedule)),
        ("FFN (D=dense, E=MoE)", _runs(s.mlp_schedule)),
        ("AttnRes", f"block {c.attn_res_block_size}, banks at layers {s.attn_res_block_starts}"
                    if c.attn_res_block_size else "off (plain residual)"),
        ("experts", f"{c.num_experts} routed, top-{c.num_experts_per_token}, {c.num_shared_experts} shared, "
                    f"format {c.expert_format or 'unquantized'}" if c.moe_layers else "none"),
        ("parameters, total", f"{s.params_total:,}"),
        ("parameters, active per token", f"{s.params_active_per_token:,} ({_human(s.params_active_per_token)})"),
        ("parameters, routed experts", f"{s.params_routed_experts:,}"),
        ("tensor bytes (text)", f"{s.bytes_tensors:,}"),
    ]
    if s.bytes_on_disk is not None:
        rows.append(("bytes on disk (*.safetensors)", f"{s.bytes_on_disk:,}"))
    rows += [
        ("bytes per expert", f"{s.bytes_per_expert:,}"),
        ("expert bytes read per token", f"{s.expert_bytes_per_token:,}"),
        ("KDA state per sequence", f"{s.kda_state_bytes_per_seq:,} B = {s.kda_recurrent_bytes_per_seq:,} recurrent "
                                   f"(fp32) + {s.kda_conv_bytes_per_seq:,} conv (bf16)"),
        ("MLA cache per token", f"{s.mla_cache_bytes_per_token:,} B (c_kv {c.kv_lora_rank} + k_x "
                                f"{c.qk_rope_head_dim} values, bf16)"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
