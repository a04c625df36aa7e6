"""Running models bigger than memory: the memory plan, expert extents on disk, the expert store
(slot cache + positioned reads in flight) that streamed expert banks draw from, and the trunk store
that streamed layers' matrices are read into."""

from k3.streaming.plan import MemoryPlan, minimum_budget, plan_memory

__all__ = ["MemoryPlan", "minimum_budget", "plan_memory"]
