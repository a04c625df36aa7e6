"""Speed estimate for `k3 doctor`: exactly the memory plan k3.streaming makes, which `k3 plan`,
`generate` and `serve` run. A budget below the planner's minimum is refused there, so it is refused
here too (mode "refused", with the planner's reason), never estimated as a plan k3 would not run.
Seconds per token = resident active bytes / memory bandwidth + streamed bytes / disk bandwidth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from k3.config import K3Config
from k3.streaming.plan import expert_sizes, plan_memory, weight_bytes


@dataclass(frozen=True)
class Estimate:
    mode: str  # "resident", "stream-experts", "stream-trunk", or "refused" (k3 will not run here; see `refusal`)
    budget: int
    trunk_bytes: int
    expert_bytes_total: int
    expert_cache_bytes: int
    expert_bytes_per_token: int
    hit_rate: float
    streamed_bytes_per_token: float
    seconds_per_token: float | None
    refusal: str | None = None    # the planner's reason, when mode is "refused"
    streamed_layers: int = 0      # stream-trunk: layers whose large matrices are read every token
    trunk_streamed_bytes_per_token: int = 0
    trunk_format: str = "as stored"   # or "int8 at load" (k3 doctor --trunk int8), or "int8" (a derived checkpoint)

    def to_dict(self) -> dict:
        return asdict(self)


def estimate(c: K3Config, budget: int, mem_bw: float, disk_bw: float, int8_at_load: bool = False,
             state_bytes: int = 2 ** 30) -> Estimate:
    """state_bytes: the sequence-state cache inside the budget (`k3 plan`'s and the engine's default 1GiB)."""
    trunk, _, experts = weight_bytes(c, None)
    measured = mem_bw > 0 and disk_bw > 0
    at_load = int8_at_load and c.trunk_format is None
    fmt = "int8 at load" if at_load else c.trunk_format or "as stored"
    try:
        p = plan_memory(c, budget, int8_at_load=int8_at_load, state_bytes=state_bytes)
    except ValueError as e:  # what `k3 plan`/`generate`/`serve` say at this budget
        return Estimate("refused", budget, trunk, experts, 0, expert_sizes(c, experts)[2], 0.0, 0.0, None, str(e),
                        trunk_format=fmt)
    seconds = p.seconds_per_token(disk_bw, mem_bw) if measured else None
    return Estimate(p.mode, budget, p.trunk_bytes, experts, p.expert_cache_bytes, p.expert_bytes_per_token,
                    p.expected_hit_rate, p.streamed_bytes_per_token, seconds, None, len(p.streamed_layers),
                    p.trunk_streamed_bytes_per_token, fmt)
