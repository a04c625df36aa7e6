"""Prometheus metrics for the server: requests by status, TTFT and inter-token latency histograms,
tokens generated, queue depth, running sequences, cache usage, prefix-cache queries and hits (in
prompt tokens, as vLLM counts them) and snapshots, speculative drafts and accepted drafts. One registry
per app (no globals)."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("k3_requests", "HTTP requests by path and status", ["path", "status"], registry=r)
        self.ttft = Histogram("k3_time_to_first_token_seconds", "submit to first token", buckets=LATENCY_BUCKETS,
                              registry=r)
        self.itl = Histogram("k3_inter_token_latency_seconds", "between consecutive tokens of a request",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.tokens = Counter("k3_generation_tokens", "tokens generated", registry=r)
        self.queue = Gauge("k3_queue_depth", "requests waiting to be scheduled", registry=r)
        self.running = Gauge("k3_running_sequences", "sequences being generated", registry=r)
        self.slots = Gauge("k3_kda_slots_used", "KDA state slots in use", registry=r)
        self.blocks = Gauge("k3_mla_blocks_used", "MLA cache blocks in use", registry=r)
        self.prefix_queries = Counter("k3_prefix_cache_queries", "prompt tokens looked up in the prefix cache",
                                      registry=r)
        self.prefix_hits = Counter("k3_prefix_cache_hits", "prompt tokens whose state came from the prefix cache",
                                   registry=r)
        self.snapshots = Gauge("k3_prefix_cache_snapshots", "KDA snapshots held in memory", registry=r)
        self.snapshot_bytes = Gauge("k3_prefix_cache_snapshot_bytes", "bytes those snapshots take", registry=r)
        self.spec_windows = Counter("k3_spec_decode_num_drafts", "verify windows (steps with drafts)", registry=r)
        self.spec_drafted = Counter("k3_spec_decode_num_draft_tokens", "draft tokens verified", registry=r)
        self.spec_accepted = Counter("k3_spec_decode_num_accepted_tokens", "draft tokens accepted", registry=r)
        self.spec_rate = Gauge("k3_spec_decode_acceptance_rate", "accepted / drafted tokens so far", registry=r)
        self._deltas = {"prefix_cache_queries": self.prefix_queries, "prefix_cache_hits": self.prefix_hits,
                        "spec_windows": self.spec_windows, "spec_drafted_tokens": self.spec_drafted,
                        "spec_accepted_tokens": self.spec_accepted}
        self._counted = dict.fromkeys(self._deltas, 0)
        self._lock = threading.Lock()   # two scrapes at once must not count a delta twice

    def render(self, engine_stats: dict) -> bytes:
        self.queue.set(engine_stats["waiting"])
        self.running.set(engine_stats["running"])
        self.slots.set(engine_stats["slots_total"] - engine_stats["slots_free"])
        self.blocks.set(engine_stats["blocks_total"] - engine_stats["blocks_free"])
        with self._lock:
            for key, counter in self._deltas.items():
                now = engine_stats.get(key, 0)
                counter.inc(max(0, now - self._counted[key]))
                self._counted[key] = max(now, self._counted[key])
        self.snapshots.set(engine_stats.get("prefix_cache_snapshots", 0))
        self.snapshot_bytes.set(engine_stats.get("prefix_cache_snapshot_bytes", 0))
        self.spec_rate.set(engine_stats.get("spec_acceptance_rate", 0.0))
        return generate_latest(self.registry)
