"""What stays resident under a memory budget, what streams, and what a decode token costs.

Resident first: the trunk (attention, norms, router, latent projections, shared experts, lm_head;
kept in the storage dtype, fp32 parameters as fp32) and the engine's sequence-state cache. The
embedding table is read a row at a time from its memory map when weights keep their stored dtype,
so it is not resident; converted to another dtype it is. Everything left holds routed experts: all
of them (resident mode) or a cache of `expert_slots` experts, misses streamed from the shards.

Routing is nearly flat under Quantile Balancing (CONTEXT section 5.4), so the expected hit rate of
a cache holding a fraction f of all experts is about f.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from k3.checkpoint.layout import expected_tensors
from k3.config import K3Config

EMBEDDING = "model.embed_tokens.weight"
MIN_STREAM_SLOTS = 2  # double buffering: one expert computes while the next is read


@dataclass(frozen=True)
class MemoryPlan:
    budget: int
    mode: str  # "resident" or "stream-experts"
    trunk_bytes: int
    embedding_bytes: int
    embedding_resident: bool
    state_bytes: int
    expert_bytes: int  # one expert, all three matrices, packed + scales
    num_experts_total: int  # over all MoE layers
    expert_slots: int  # experts held in memory
    expert_bytes_per_token: int  # decode at batch 1, no reuse
    expected_hit_rate: float

    @property
    def expert_cache_bytes(self) -> int:
        return self.expert_slots * self.expert_bytes

    @property
    def resident_bytes(self) -> int:
        embed = self.embedding_bytes if self.embedding_resident else 0
        return self.trunk_bytes + embed + self.state_bytes + self.expert_cache_bytes

    @property
    def streamed_bytes_per_token(self) -> float:
        return self.expert_bytes_per_token * (1.0 - self.expected_hit_rate)

    def seconds_per_token(self, disk_bytes_per_s: float, mem_bytes_per_s: float) -> float:
        """Bandwidth-bound decode estimate: resident active bytes from RAM, misses from disk."""
        resident = self.trunk_bytes + self.expert_bytes_per_token * self.expected_hit_rate
        return resident / mem_bytes_per_s + self.streamed_bytes_per_token / disk_bytes_per_s

    def to_dict(self) -> dict:
        return asdict(self) | {"expert_cache_bytes": self.expert_cache_bytes, "resident_bytes": self.resident_bytes,
                               "streamed_bytes_per_token": self.streamed_bytes_per_token}


def weight_bytes(c: K3Config, storage_itemsize: int | None) -> tuple[int, int, int]:
    """(trunk bytes, embedding bytes, all routed-expert bytes); storage_itemsize None = as stored."""
    trunk = embed = experts = 0
    for s in expected_tensors(c):
        if s.expert is not None:
            experts += s.nbytes
            continue
        if storage_itemsize is None:
            n = s.nbytes
        else:  # fp32 parameters (gates, conv, norms) never narrow
            n = s.params * (max(4, storage_itemsize) if s.dtype == "F32" else storage_itemsize)
        if s.name == EMBEDDING:
            embed = n
        else:
            trunk += n
    return trunk, embed, experts


def expert_sizes(c: K3Config, experts_bytes: int) -> tuple[int, int, int]:
    """(experts over all MoE layers, bytes of one expert, expert bytes a decode token reads, no reuse)."""
    n_moe = len(c.moe_layers)
    total = n_moe * c.num_experts
    per_expert = experts_bytes // total if total else 0
    return total, per_expert, per_expert * c.num_experts_per_token * n_moe


def plan_memory(c: K3Config, budget: int, *, storage_itemsize: int | None = None, state_bytes: int = 0
                ) -> MemoryPlan:
    trunk, embed, experts = weight_bytes(c, storage_itemsize)
    embed_resident = storage_itemsize is not None
    total_experts, per_expert, per_token = expert_sizes(c, experts)
    fixed = trunk + (embed if embed_resident else 0) + state_bytes
    room = budget - fixed
    if total_experts == 0 or room >= experts:
        return MemoryPlan(budget, "resident", trunk, embed, embed_resident, state_bytes, per_expert, total_experts,
                          total_experts, per_token, 1.0)
    slots = room // per_expert if room > 0 else 0
    if slots < MIN_STREAM_SLOTS:
        need = fixed + MIN_STREAM_SLOTS * per_expert
        raise ValueError(
            f"memory budget {_gb(budget)} is too small: the resident trunk needs {_gb(trunk)}"
            + (f" + embedding {_gb(embed)}" if embed_resident else "")
            + (f" + sequence state {_gb(state_bytes)}" if state_bytes else "")
            + f", plus {MIN_STREAM_SLOTS} expert slots of {_gb(per_expert)}; give at least {_gb(need)} "
            f"({need:,} B)")
    return MemoryPlan(budget, "stream-experts", trunk, embed, embed_resident, state_bytes, per_expert,
                      total_experts, slots, per_token, slots / total_experts)


def _gb(n: int) -> str:
    return f"{n / 1e9:,.2f} GB"
