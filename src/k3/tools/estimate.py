"""Speed estimate for `k3 doctor`: the memory plan of k3.offload, plus the one case it refuses - a
budget below the trunk itself, where the part of the trunk over budget is read from disk every token.
Seconds per token = resident active bytes / memory bandwidth + streamed bytes / disk bandwidth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from k3.config import K3Config
from k3.offload.plan import expert_sizes, plan_memory, weight_bytes


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
    trunk, _, experts = weight_bytes(c, None)
    measured = mem_bw > 0 and disk_bw > 0
    try:
        p = plan_memory(c, budget)
    except ValueError:  # the trunk does not fit: part of it streams too, every token
        per_token = expert_sizes(c, experts)[2]
        streamed = max(0, trunk - budget) + per_token
        seconds = min(budget, trunk) / mem_bw + streamed / disk_bw if measured else None
        return Estimate("stream-trunk", budget, trunk, experts, 0, per_token, 0.0, streamed, seconds)
    seconds = p.seconds_per_token(disk_bw, mem_bw) if measured else None
    return Estimate(p.mode, budget, p.trunk_bytes, experts, p.expert_cache_bytes, p.expert_bytes_per_token,
                    p.expected_hit_rate, p.streamed_bytes_per_token, seconds)
