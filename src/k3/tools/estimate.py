"""A first-order memory plan and speed estimate for one decode step of batch 1.

The trunk (everything but routed experts, less the embedding table, which is read a row at a time
from its memory map) must be resident; routed experts are resident if they fit, otherwise the
rest of the budget caches them and misses stream from disk. Below the trunk's size, the part of the
trunk over budget streams too (every token). Routing is nearly flat under Quantile
Balancing (CONTEXT §5.4), so the cache hit rate is taken as the cached fraction of experts.
Seconds per token = resident active bytes / memory bandwidth + missed expert bytes / disk bandwidth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from k3.checkpoint.layout import expected_tensors
from k3.config import K3Config


@dataclass(frozen=True)
class Estimate:
    mode: str  # "resident", "stream-experts", "stream-trunk" (the trunk itself exceeds the budget)
    budget: int
    trunk_bytes: int
    expert_bytes_total: int
    expert_cache_bytes: int
    expert_bytes_per_token: int
    hit_rate: float
    streamed_bytes_per_token: float
    seconds_per_token: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def estimate(c: K3Config, budget: int, mem_bw: float, disk_bw: float) -> Estimate:
    specs = expected_tensors(c)
    experts = sum(s.nbytes for s in specs if s.expert is not None)
    embed = next(s.nbytes for s in specs if s.name == "model.embed_tokens.weight")
    trunk = sum(s.nbytes for s in specs if s.expert is None) - embed
    n_moe = len(c.moe_layers)
    per_token = (experts // (n_moe * c.num_experts) * c.num_experts_per_token * n_moe) if n_moe else 0
    if trunk > budget:  # part of the trunk streams too, every token (the slowest working plan)
        streamed = (trunk - budget) + per_token
        seconds = budget / mem_bw + streamed / disk_bw if mem_bw > 0 and disk_bw > 0 else None
        return Estimate("stream-trunk", budget, trunk, experts, 0, per_token, 0.0, streamed, seconds)
    cache = min(experts, budget - trunk)
    hit = cache / experts if experts else 1.0
    streamed = per_token * (1.0 - hit)
    seconds = (trunk + per_token * hit) / mem_bw if mem_bw > 0 else 0.0
    if streamed:
        seconds = seconds + streamed / disk_bw if disk_bw > 0 else None
    mode = "resident" if cache >= experts else "stream-experts"
    return Estimate(mode, budget, trunk, experts, cache, per_token, hit, streamed, seconds)
