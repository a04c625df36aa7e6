"""Routed experts read from the checkpoint's shards on demand, through an `ExpertStore`.

Computes exactly what `PackedExperts` computes (same function, same bytes), so a streamed model's
outputs are bit-identical to the resident one's; only where the bytes come from differs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from k3.layers.experts import ExpertBank
from k3.ops.mxfp4.expert import glu_expert
from k3.streaming.store import ExpertStore


class StreamedExperts(ExpertBank):
    def __init__(self, store: ExpertStore, layer: int, group_size: int, act: str, beta: float,
                 linear_beta: float | None):
        super().__init__()
        self.store, self.layer, self.group_size = store, layer, group_size
        self.act, self.beta, self.linear_beta = act, beta, linear_beta

    def iterate(self, experts: list[int]) -> Iterator[tuple[int, object]]:
        for e, views in self.store.schedule(self.layer, experts):
            yield e, functools.partial(glu_expert, w=views, group_size=self.group_size, act=self.act,
                                       beta=self.beta, linear_beta=self.linear_beta)

    def forward(self, e: int, z):
        raise RuntimeError("streamed experts run through iterate(); they hold no weights of their own")
