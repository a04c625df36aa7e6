"""The sampler: turns one step's logits rows into tokens (and log-probabilities) for their requests.

All rows of a step are sampled together on the logits' device: penalties, temperature, top-k/top-p/
min-p and seeded draws in a few batched tensor ops (`k3.ops.sampling`), one host transfer at the end.
A request's draws depend only on its seed and how many tokens it has drawn, never on its batchmates
or the device. A row whose logits are not finite fails alone; if the batched pass itself raises, the
rows are retried one by one so only the row that fails is lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from k3.engine.request import Request, TokenLogprob
from k3.ops.sampling import apply_penalties_batched, sample_rows, top_logprobs_batched


@dataclass(frozen=True)
class Sample:
    token: int | None                 # None when the row failed
    logprob: TokenLogprob | None = None
    error: str | None = None


class Sampler:
    def __init__(self, sampleable: int | None = None):
        """sampleable: only ids below it are drawn. A checkpoint's vocab_size may exceed what its
        tokenizer can decode (embedding rows padded for alignment, a small tokenizer on a random
        model); those ids are masked from sampling, so no request can fail decoding one."""
        self.sampleable = sampleable

    def __call__(self, logits: torch.Tensor, requests: list[Request]) -> list[Sample]:
        """logits [n, V] (one row per request, in order) -> one Sample per request."""
        if not requests:
            return []
        if self.sampleable is not None and self.sampleable < logits.shape[-1]:
            logits = logits[:, :self.sampleable]
        finite = torch.isfinite(logits).all(dim=-1).tolist()
        ok = [i for i, f in enumerate(finite) if f]
        out = [Sample(None, error="the model produced non-finite logits (NaN/inf) for this request")] * len(requests)
        rows = logits if len(ok) == len(requests) else logits[ok]
        try:
            done = self._sample(rows, [requests[i] for i in ok]) if ok else []
        except Exception:  # noqa: BLE001 - retry alone, so one bad row cannot fail its batchmates
            done = [self._one(logits[i:i + 1], requests[i]) for i in ok]
        for i, s in zip(ok, done):
            out[i] = s
        return out

    def _one(self, row: torch.Tensor, req: Request) -> Sample:
        try:
            return self._sample(row, [req])[0]
        except Exception as e:  # noqa: BLE001
            return Sample(None, error=f"sampling failed: {type(e).__name__}: {e}")

    def _sample(self, logits: torch.Tensor, reqs: list[Request]) -> list[Sample]:
        dev = logits.device
        params = [r.params for r in reqs]
        if all(p.temperature == 0 and p.logprobs is None and p.repetition_penalty == 1.0 and not p.presence_penalty
               and not p.frequency_penalty for p in params):
            return [Sample(t) for t in logits.argmax(dim=-1).tolist()]   # greedy: the first maximum
        x = logits.float()
        if any(p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty for p in params):
            x = apply_penalties_batched(x, [r.prompt_ids for r in reqs], [r.output_ids for r in reqs],
                                        [p.repetition_penalty for p in params], [p.presence_penalty for p in params],
                                        [p.frequency_penalty for p in params])

        def col(values, dtype):
            return torch.tensor(values, dtype=dtype, device=dev)

        tokens = sample_rows(x, col([p.temperature for p in params], torch.float32),
                             col([p.top_k for p in params], torch.long), col([p.top_p for p in params], torch.float32),
                             col([p.min_p for p in params], torch.float32), col([r.seed for r in reqs], torch.long),
                             col([len(r.output_ids) for r in reqs], torch.long))
        want = [i for i, p in enumerate(params) if p.logprobs is not None]
        logprobs: list[TokenLogprob | None] = [None] * len(reqs)
        if want:
            idx = torch.tensor(want, device=dev)
            chosen, tops = top_logprobs_batched(logits[idx], tokens[idx], [params[i].logprobs for i in want])
            ids = tokens[idx].tolist()
            for i, t, lp, top in zip(want, ids, chosen, tops):
                logprobs[i] = TokenLogprob(t, lp, top)
        return [Sample(t, lp) for t, lp in zip(tokens.tolist(), logprobs)]
