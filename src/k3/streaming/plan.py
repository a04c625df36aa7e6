"""What stays resident under a memory budget, what streams, and what a decode token costs.

Resident first: the trunk (attention, norms, router, latent projections, shared experts, lm_head;
kept in the storage dtype, fp32 parameters as fp32) and the engine's sequence-state cache. The
embedding table is read a row at a time from its memory map when weights keep their stored dtype,
so it is not resident; converted to another dtype it is. Everything left holds routed experts: all
of them (resident mode) or a cache of `expert_slots` experts, misses streamed from the shards.

When the trunk does not fit beside two expert slots ("stream-trunk"), whole layers' large matrices
stream too (k3.streaming.trunk): every trunk byte is read once a token, more often than any expert byte,
so as many layers as fit stay resident, two layer-sized arenas take the streamed ones, and experts get
what is left.

Routing is nearly flat under Quantile Balancing (CONTEXT section 5.4), so the expected hit rate of
a cache holding a fraction f of all experts is about f.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, replace

from k3.checkpoint.layout import expected_tensors
from k3.config import K3Config
from k3.streaming.trunk import ARENAS, layer_stream_specs, region_bytes
from k3.streaming.vision_memory import vision_bytes

EMBEDDING = "model.embed_tokens.weight"
MIN_STREAM_SLOTS = 2  # double buffering: one expert computes while the next is read


@dataclass(frozen=True)
class MemoryPlan:
    budget: int
    mode: str  # "resident", "stream-experts" or "stream-trunk"
    trunk_bytes: int
    embedding_bytes: int
    embedding_resident: bool
    state_bytes: int
    expert_bytes: int  # one expert, all three matrices, packed + scales
    num_experts_total: int  # over all MoE layers
    expert_slots: int  # experts held in memory
    expert_bytes_per_token: int  # decode at batch 1, no reuse
    expected_hit_rate: float
    streamed_layers: tuple[int, ...] = ()  # stream-trunk: layers whose large matrices are read each token
    streamed_trunk_bytes: int = 0          # those matrices' bytes, as read from the shards
    trunk_arena_bytes: int = 0             # the arenas they are read into
    streamed_trunk_resident_bytes: int = 0  # what those layers would take resident (less, with int8 at load)
    int8_at_load: bool = False             # trunk="int8" on a bf16 checkpoint: resident layers held as int8
    vision_bytes: int = 0                  # the vision tower's weights and its largest image's activations

    @property
    def expert_cache_bytes(self) -> int:
        return self.expert_slots * self.expert_bytes

    @property
    def resident_bytes(self) -> int:
        embed = self.embedding_bytes if self.embedding_resident else 0
        trunk = self.trunk_bytes - self.streamed_trunk_resident_bytes + self.trunk_arena_bytes
        return trunk + embed + self.state_bytes + self.vision_bytes + self.expert_cache_bytes

    @property
    def streams_experts(self) -> bool:
        """Routed experts are read from the shards (stream-experts, and stream-trunk on a MoE model)."""
        return self.mode != "resident" and self.num_experts_total > 0

    @property
    def trunk_streamed_bytes_per_token(self) -> int:
        """Streamed layers beyond the arenas' number are read every token; up to that many are read once."""
        return self.streamed_trunk_bytes if len(self.streamed_layers) > ARENAS else 0

    @property
    def streamed_bytes_per_token(self) -> float:
        return self.expert_bytes_per_token * (1.0 - self.expected_hit_rate) + self.trunk_streamed_bytes_per_token

    def seconds_per_token(self, disk_bytes_per_s: float, mem_bytes_per_s: float) -> float:
        """Bandwidth-bound decode estimate: resident active bytes from RAM, the rest from disk."""
        per_token = self.trunk_streamed_bytes_per_token
        from_ram = self.trunk_bytes - self.streamed_trunk_resident_bytes + (0 if per_token else self.streamed_trunk_bytes)
        resident = from_ram + self.expert_bytes_per_token * self.expected_hit_rate
        return resident / mem_bytes_per_s + self.streamed_bytes_per_token / disk_bytes_per_s

    def to_dict(self) -> dict:
        return asdict(self) | {"expert_cache_bytes": self.expert_cache_bytes, "resident_bytes": self.resident_bytes,
                               "streamed_bytes_per_token": self.streamed_bytes_per_token,
                               "trunk_streamed_bytes_per_token": self.trunk_streamed_bytes_per_token}


@functools.lru_cache(maxsize=8)   # a plan asks several times; listing K3's tensors takes seconds
def weight_bytes(c: K3Config, storage_itemsize: int | None) -> tuple[int, int, int]:
    """(trunk bytes, embedding bytes, all routed-expert bytes); storage_itemsize None = as stored."""
    trunk = embed = experts = 0
    for s in expected_tensors(c):
        if s.expert is not None:
            experts += s.nbytes
            continue
        if storage_itemsize is None or s.dtype == "I8" or s.params == 0:   # int8 codes and scales keep their bytes
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


def plan_memory(c: K3Config, budget: int, *, storage_itemsize: int | None = None, state_bytes: int = 0,
                int8_at_load: bool = False) -> MemoryPlan:
    """int8_at_load: the trunk is quantised as it is read (load_model(trunk="int8")): resident layers
    cost their int8 bytes, streamed ones are read as stored (a no-op for an int8 checkpoint). A config
    with a vision tower (c.vision) holds it resident beside the state (plan for text only with
    c.replace(vision=None))."""
    vision = vision_bytes(c, storage_itemsize)
    try:
        plan = _plan(c, budget, storage_itemsize, state_bytes + vision, int8_at_load)
    except ValueError as e:
        if not vision:
            raise
        raise ValueError(f"{e} (this counts the vision tower, {_gb(vision)} with its largest image's activations: "
                         "--no-vision plans for the text model alone)") from None
    return replace(plan, state_bytes=state_bytes, vision_bytes=vision)


def _plan(c: K3Config, budget: int, storage_itemsize: int | None, state_bytes: int, int8_at_load: bool) -> MemoryPlan:
    resident_c, int8_at_load = _held_layout(c, int8_at_load)
    trunk, embed, experts = weight_bytes(resident_c, storage_itemsize)
    embed_resident = storage_itemsize is not None
    total_experts, per_expert, per_token = expert_sizes(c, experts)
    sizes = (trunk, embed, embed_resident, state_bytes, per_expert, total_experts)
    fixed = trunk + (embed if embed_resident else 0) + state_bytes
    room = budget - fixed
    if room >= experts:
        return MemoryPlan(budget, "resident", *sizes, total_experts, per_token, 1.0, int8_at_load=int8_at_load)
    slots = room // per_expert if room > 0 else 0
    if slots < MIN_STREAM_SLOTS:
        return _plan_trunk(c, resident_c, budget, storage_itemsize, sizes, per_token)
    return MemoryPlan(budget, "stream-experts", *sizes, slots, per_token, slots / total_experts, int8_at_load=int8_at_load)


def _held_layout(c: K3Config, int8_at_load: bool) -> tuple[K3Config, bool]:
    """(the layout resident layers are held in, whether int8 is made at load): a checkpoint whose trunk
    is int8 already is held as it is stored."""
    at_load = int8_at_load and c.trunk_format is None
    return (replace(c, trunk_format="int8") if at_load else c), at_load


def _plan_trunk(c: K3Config, resident_c: K3Config, budget: int, storage_itemsize: int | None, sizes: tuple,
                per_token: int) -> MemoryPlan:
    """The trunk does not fit: resident layers chosen largest first (each byte is read once a token
    whichever layer holds it), the rest streamed through ARENAS layer-sized arenas, experts last.
    `resident_c` is the layout resident layers are held in (c, or c with an int8 trunk at load)."""
    trunk, _, _, state_bytes, per_expert, total_experts = sizes
    read, held, arena, min_slots, base = _trunk_floor(c, resident_c, sizes)
    if storage_itemsize is not None or budget < base:
        raise ValueError(_too_small(budget, trunk, base, storage_itemsize, state_bytes))
    room, streamed = budget - base, []
    for i in sorted(held, key=lambda i: (-held[i], i)):
        if held[i] <= room:
            room -= held[i]
        else:
            streamed.append(i)
    slots = min(total_experts, min_slots + room // per_expert) if per_expert else 0
    return MemoryPlan(budget, "stream-trunk", *sizes, slots, per_token, slots / total_experts if total_experts else 1.0,
                      tuple(sorted(streamed)), sum(read[i] for i in streamed), arena, sum(held[i] for i in streamed),
                      resident_c is not c)


def _trunk_floor(c: K3Config, resident_c: K3Config, sizes: tuple) -> tuple[dict[int, int], dict[int, int], int, int, int]:
    """(streamable bytes by layer as read, the same layers' bytes as held resident, arena bytes, minimum
    expert slots, the budget with every layer streamed)."""
    trunk, embed, embed_resident, state_bytes, per_expert, total_experts = sizes
    specs = {i: layer for i, layer in layer_stream_specs(c).items() if layer}
    read = {i: sum(s.nbytes for s in layer) for i, layer in specs.items()}
    held = {i: sum(s.nbytes for s in layer) for i, layer in layer_stream_specs(resident_c).items() if layer}
    arena = ARENAS * max((sum(region_bytes(s.nbytes) for s in layer) for layer in specs.values()), default=0)
    min_slots = MIN_STREAM_SLOTS if total_experts else 0
    base = trunk - sum(held.values()) + (embed if embed_resident else 0) + state_bytes + arena + min_slots * per_expert
    return read, held, arena, min_slots, base


def minimum_budget(c: K3Config, *, storage_itemsize: int | None = None, state_bytes: int = 0,
                   int8_at_load: bool = False) -> int:
    """The smallest budget any plan fits in: every layer streamed when weights keep their stored dtype
    (unless the resident trunk beside two expert slots is smaller), else the whole converted trunk
    beside two expert slots (and the vision tower, when the config has one)."""
    state_bytes += vision_bytes(c, storage_itemsize)
    resident_c, _ = _held_layout(c, int8_at_load)
    trunk, embed, experts = weight_bytes(resident_c, storage_itemsize)
    total_experts, per_expert, _ = expert_sizes(c, experts)
    if storage_itemsize is None:   # stream-trunk's floor, or the whole trunk resident when that is less (small models)
        floor = _trunk_floor(c, resident_c, (trunk, embed, False, state_bytes, per_expert, total_experts))[4]
        return min(floor, trunk + state_bytes + min(experts, MIN_STREAM_SLOTS * per_expert))
    return trunk + embed + state_bytes + min(experts, MIN_STREAM_SLOTS * per_expert)


def _too_small(budget: int, trunk: int, need: int, storage_itemsize: int | None, state_bytes: int) -> str:
    if storage_itemsize is not None:
        return (f"memory budget {_gb(budget)} cannot hold the trunk ({_gb(trunk)} converted): streaming the trunk "
                "reads its layers as stored, so keep the stored dtype (dtype=None, --dtype stored), or raise the budget")
    return (f"memory budget {_gb(budget)} is too small: with every layer's large matrices streamed, the rest of the "
            f"trunk (norms, routers, lm_head), two layer arenas, two expert slots"
            + (f" and the sequence state ({_gb(state_bytes)})" if state_bytes else "")
            + f" still need {_gb(need)}; give at least {_gb(need)} ({need:,} B)")


def _gb(n: int) -> str:
    return f"{n / 1e9:,.2f} GB"
