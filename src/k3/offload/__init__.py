"""Running models bigger than memory: the memory plan, expert extents on disk, and the expert store
(slot cache + positioned reads in flight) that streamed expert banks draw from."""

from k3.offload.plan import MemoryPlan, plan_memory

__all__ = ["MemoryPlan", "plan_memory"]
