"""Counters of the expert store: reads, hits, bytes, time reading and time compute waited."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StoreStats:
    slots: int
    slot_bytes: int
    hits: int = 0
    misses: int = 0
    bytes_read: int = 0
    read_seconds: float = 0.0  # summed over reader threads
    wait_seconds: float = 0.0  # compute blocked on a read
    direct_reads: bool = False

    def add_read(self, nbytes: int, seconds: float, direct: bool) -> None:
        self.bytes_read += nbytes
        self.read_seconds += seconds
        self.direct_reads = direct

    def to_dict(self) -> dict:
        requests = self.hits + self.misses
        return {"expert_slots": self.slots, "expert_cache_bytes": self.slots * self.slot_bytes,
                "expert_reads": self.misses, "expert_hits": self.hits,
                "expert_hit_rate": self.hits / requests if requests else 0.0,
                "expert_bytes_read": self.bytes_read,
                "read_bytes_per_s": self.bytes_read / self.read_seconds if self.read_seconds else 0.0,
                "read_seconds": self.read_seconds, "wait_seconds": self.wait_seconds,
                "direct_io": self.direct_reads}
