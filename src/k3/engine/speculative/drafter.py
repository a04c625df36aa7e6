"""The drafter: after each step, drafts for every decoding request (from a proposer), sized by how
well that request's drafts have been accepted; and the speculative-decoding statistics.

Backing off: each request keeps a running mean of accepted drafts per window and drafts one more than
that (at most k). A window that accepts nothing doubles the steps the request then decodes without
drafting (1, 3, 7, ... up to 63); one that accepts anything clears it. So a request whose output
copies nothing from its context pays for few windows, and one that copies pays for none of this.
With `disable_by_batch_size`, nothing is drafted while that many requests run (vLLM's meaning).
A constrained request's drafts are cut at the first token its grammar would refuse; the sampler masks
each row of its window with what the grammar allows there (Constraint.window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from k3.engine.request import Request
from k3.engine.speculative.config import SpeculativeConfig

MAX_PAUSE = 63


@dataclass
class Pace:
    mean_accepted: float
    misses: int = 0        # windows in a row that accepted nothing
    pause: int = 0         # steps left to decode without drafting


class Drafter:
    def __init__(self, config: SpeculativeConfig, proposer):
        self.config, self.proposer = config, proposer
        self.pace: dict[str, Pace] = {}
        self.counters = {"spec_windows": 0, "spec_drafted_tokens": 0, "spec_accepted_tokens": 0}

    def _want(self, req: Request) -> int:
        """How many drafts this request should get now (0: none)."""
        if not req.output_ids or req.num_pending != 1:
            return 0              # still in prefill, or not yet caught up
        room = req.params.max_tokens - len(req.output_ids) - 1   # leave room for the token after them
        pace = self._pace(req)
        if pace.pause:
            pace.pause -= 1
            return 0
        return max(0, min(room, self.config.num_speculative_tokens, math.ceil(pace.mean_accepted) + 1))

    def propose(self, requests: list[Request]) -> None:
        """Set `draft_ids` on each request (empty where it should decode plainly)."""
        items, asked = [], []
        limit = self.config.disable_by_batch_size
        busy = limit is not None and len(requests) >= limit   # a full batch already reads the weights once
        for req in requests:
            req.draft_ids = []
            k = 0 if busy else self._want(req)
            if k:
                items.append((req.all_ids, k))
                asked.append(req)
        for req, draft in zip(asked, self.proposer.propose(items) if items else []):
            draft = list(draft)
            if req.constraint is not None:   # drafts the grammar would refuse are never verified
                draft = draft[:req.constraint.valid_prefix(draft)]
            req.draft_ids = draft

    def observe(self, req: Request, drafted: int, accepted: int) -> None:
        """A window of `drafted` drafts accepted `accepted` of them."""
        self.counters["spec_windows"] += 1
        self.counters["spec_drafted_tokens"] += drafted
        self.counters["spec_accepted_tokens"] += accepted
        pace = self._pace(req)
        pace.mean_accepted = 0.5 * pace.mean_accepted + 0.5 * accepted
        if accepted:
            pace.misses = 0
        else:
            pace.misses += 1
            pace.pause = min(MAX_PAUSE, 2 ** pace.misses - 1)

    def _pace(self, req: Request) -> Pace:
        return self.pace.setdefault(req.request_id, Pace(float(self.config.num_speculative_tokens)))

    def forget(self, request_id: str) -> None:
        self.pace.pop(request_id, None)

    def stats(self) -> dict:
        c = self.counters
        windows, drafted = c["spec_windows"], c["spec_drafted_tokens"]
        return dict(c, spec_acceptance_rate=c["spec_accepted_tokens"] / drafted if drafted else 0.0,
                    spec_mean_accepted_length=1 + c["spec_accepted_tokens"] / windows if windows else 0.0)
