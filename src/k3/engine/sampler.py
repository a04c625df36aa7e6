"""The sampler: turns one step's logits rows into tokens (and log-probabilities) for their requests.

All rows of a step are sampled together on the logits' device: penalties, temperature, top-k/top-p/
min-p and seeded draws in a few batched tensor ops (`k3.ops.sampling`), one host transfer at the end.
A request's draws depend only on its seed and how many tokens it has drawn, never on its batchmates
or the device. A row whose logits are not finite fails alone; if the batched pass itself raises, the
rows are retried one by one so only the row that fails is lost.

A request with drafts (speculative decoding) owns one row per draft plus one, and gets back the drafts
its target distributions accept followed by one more token (`k3.ops.speculative`): for greedy requests
exactly the tokens plain decoding would give; for sampled ones tokens distributed as plain sampling's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from k3.engine.request import Request, TokenLogprob
from k3.ops.sampling import (GREEDY_BELOW, apply_penalties_batched, filter_logits_batched, sample_rows,
                             top_logprobs_batched)
from k3.ops.speculative import verify_greedy, verify_sampled


def finite_rows(logits: torch.Tensor) -> torch.Tensor:
    """[N, V] -> [N] bool: whether every entry of a row is finite. Through the row's largest magnitude
    (amax propagates NaN, and an infinity is its own maximum): one reduction, where isfinite().all()
    made a [N, V] mask first."""
    return torch.isfinite(logits.abs().amax(dim=-1))


@dataclass(frozen=True)
class Sample:
    tokens: tuple[int, ...] = ()      # to emit, in order (accepted drafts, then one more); () when it failed
    logprobs: tuple[TokenLogprob, ...] | None = None
    error: str | None = None

    @property
    def accepted(self) -> int:
        """Drafts accepted (tokens before the last)."""
        return max(0, len(self.tokens) - 1)


class Sampler:
    def __init__(self, sampleable: int | None = None, holes=()):
        """sampleable: only ids below it are drawn. A checkpoint's vocab_size may exceed what its
        tokenizer can decode (embedding rows padded for alignment, a small tokenizer on a random
        model); those ids are masked from sampling, so no request can fail decoding one. `holes`:
        ids below it that the tokenizer cannot decode either (masked the same way)."""
        self.sampleable = sampleable
        self.holes = torch.tensor(sorted(holes), dtype=torch.long) if holes else None

    def __call__(self, logits: torch.Tensor, requests: list[Request],
                 drafts: list[tuple[int, ...]] | None = None) -> list[Sample]:
        """logits [rows, V] (1 + len(drafts[i]) rows per request, in order) -> one Sample per request."""
        if not requests:
            return []
        if self.sampleable is not None and self.sampleable < logits.shape[-1]:
            logits = logits[:, :self.sampleable]
        if drafts and any(drafts):
            return self._with_windows(logits, requests, drafts)
        return self._rows(logits, requests)

    def _with_windows(self, logits, requests, drafts) -> list[Sample]:
        starts = [0]
        for d in drafts:
            starts.append(starts[-1] + 1 + len(d))
        plain = [i for i, d in enumerate(drafts) if not d]
        out: list[Sample] = [Sample()] * len(requests)
        if plain:
            for i, s in zip(plain, self._rows(logits[[starts[i] for i in plain]], [requests[i] for i in plain])):
                out[i] = s
        for i, d in enumerate(drafts):
            if d:
                out[i] = self._window(logits[starts[i]:starts[i + 1]], requests[i], list(d))
        return out

    def _window(self, rows: torch.Tensor, req: Request, drafts: list[int]) -> Sample:
        if not all(finite_rows(rows).tolist()):
            return Sample(error=NON_FINITE)
        try:
            if req.constraint is not None:   # row j: what the grammar allows after drafts[:j]
                rows = rows.clone()
                _mask(rows, req.constraint.window(drafts))
            return verify_window(self._no_holes(biased(rows, [req] * rows.shape[0])), req, drafts)
        except Exception as e:  # noqa: BLE001
            return Sample(error=f"sampling failed: {type(e).__name__}: {e}")

    def _rows(self, logits: torch.Tensor, requests: list[Request]) -> list[Sample]:
        finite = finite_rows(logits).tolist()
        ok = [i for i, f in enumerate(finite) if f]
        out = [Sample(error=NON_FINITE)] * len(requests)
        rows = logits if len(ok) == len(requests) else logits[ok]
        rows = self._no_holes(biased(constrained(rows, [requests[i] for i in ok]), [requests[i] for i in ok]))
        try:
            done = self._sample(rows, [requests[i] for i in ok]) if ok else []
        except Exception:  # noqa: BLE001 - retry alone, so one bad row cannot fail its batchmates
            done = [self._one(rows[j:j + 1], requests[i]) for j, i in enumerate(ok)]
        for i, s in zip(ok, done):
            out[i] = s
        return out

    def _no_holes(self, rows: torch.Tensor) -> torch.Tensor:
        """The tokenizer's holes at -inf (after the finite check: this -inf is ours, not the model's)."""
        if self.holes is None:
            return rows
        return rows.index_fill(-1, self.holes.to(rows.device), float("-inf"))

    def _one(self, row: torch.Tensor, req: Request) -> Sample:
        try:
            return self._sample(row, [req])[0]
        except Exception as e:  # noqa: BLE001
            return Sample(error=f"sampling failed: {type(e).__name__}: {e}")

    def _sample(self, logits: torch.Tensor, reqs: list[Request]) -> list[Sample]:
        dev = logits.device
        params = [r.params for r in reqs]
        if all(p.temperature == 0 and p.logprobs is None and p.repetition_penalty == 1.0 and not p.presence_penalty
               and not p.frequency_penalty for p in params):
            return [Sample((t,)) for t in logits.argmax(dim=-1).tolist()]   # greedy: the first maximum
        x = logits.float()
        if any(p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty for p in params):
            x = apply_penalties_batched(x, [r.prompt_ids for r in reqs], [r.output_ids for r in reqs],
                                        [p.repetition_penalty for p in params], [p.presence_penalty for p in params],
                                        [p.frequency_penalty for p in params])

        def col(values, dtype):
            return torch.tensor(values, dtype=dtype, device=dev)

        tokens = sample_rows(x, col([p.temperature for p in params], torch.float32),
                             col([min(p.top_k, logits.shape[-1]) for p in params], torch.long), col([p.top_p for p in params], torch.float32),
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
        return [Sample((t,), None if lp is None else (lp,)) for t, lp in zip(tokens.tolist(), logprobs)]


NON_FINITE = "the model produced non-finite logits (NaN/inf) for this request"


def constrained(logits: torch.Tensor, reqs: list[Request]) -> torch.Tensor:
    """Rows of constrained requests with the tokens their grammar forbids at -inf (a copy; the others as
    they are). Masked after the finite check: -inf here is the grammar's, not the model's."""
    rows = [i for i, r in enumerate(reqs) if r.constraint is not None]
    if not rows:
        return logits
    out = logits.clone()
    for i in rows:
        _mask(out[i:i + 1], reqs[i].constraint.allowed().unsqueeze(0))
    return out


def _mask(rows: torch.Tensor, allowed: torch.Tensor) -> None:
    """In place: rows [n, V] at -inf where `allowed` [n, vocab] bool is False, and past the grammar's vocab."""
    allowed = allowed[:, :rows.shape[-1]].to(rows.device)
    rows[:, :allowed.shape[1]].masked_fill_(~allowed, float("-inf"))
    rows[:, allowed.shape[1]:] = float("-inf")


def biased(logits: torch.Tensor, reqs: list[Request]) -> torch.Tensor:
    """Rows of requests with a logit_bias, the bias added to its tokens (a copy; the others as they are)."""
    rows = [i for i, r in enumerate(reqs) if r.params.logit_bias]
    if not rows:
        return logits
    out = logits.clone()
    for i in rows:
        ids = [t for t, _ in reqs[i].params.logit_bias if t < out.shape[-1]]
        values = [b for t, b in reqs[i].params.logit_bias if t < out.shape[-1]]
        out[i, ids] += torch.tensor(values, dtype=out.dtype, device=out.device)
    return out


def verify_window(rows: torch.Tensor, req: Request, drafts: list[int]) -> Sample:
    """rows [k+1, V]: the target's logits at the pending token and each draft -> the tokens to emit."""
    p = req.params
    x = rows.float()
    k = len(drafts)
    if p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty:
        # Row j follows drafts 0..j-1: they count as output for its penalties.
        x = apply_penalties_batched(x, [req.prompt_ids] * (k + 1), [req.output_ids + drafts[:j] for j in range(k + 1)],
                                    [p.repetition_penalty] * (k + 1), [p.presence_penalty] * (k + 1),
                                    [p.frequency_penalty] * (k + 1))
    if p.temperature < GREEDY_BELOW:
        tokens = verify_greedy(x, drafts)
    else:
        tokens = verify_sampled(target_probs(x, p), drafts, req.seed, len(req.output_ids))
    logprobs = None
    if p.logprobs is not None:
        n = len(tokens)
        chosen, tops = top_logprobs_batched(rows[:n], torch.tensor(tokens, device=rows.device), [p.logprobs] * n)
        logprobs = tuple(TokenLogprob(t, lp, top) for t, lp, top in zip(tokens, chosen, tops))
    return Sample(tuple(tokens), logprobs)


def target_probs(x: torch.Tensor, p) -> torch.Tensor:
    """Penalised logits [T, V] fp32 -> the distributions plain sampling draws from (temperature, top-k,
    top-p, min-p, as `sample_rows`); a row its filters empty is a point mass on its maximum."""
    T, V = x.shape
    dev = x.device
    scaled = torch.nan_to_num(x / p.temperature, nan=float("-inf"), posinf=torch.finfo(x.dtype).max)
    filtered = filter_logits_batched(scaled, torch.full((T,), min(p.top_k, V), dtype=torch.long, device=dev),
                                     torch.full((T,), p.top_p, device=dev), torch.full((T,), p.min_p, device=dev))
    probs = torch.softmax(filtered, dim=-1)
    empty = ~torch.isfinite(filtered).any(dim=-1)
    if bool(empty.any()):
        probs[empty] = torch.nn.functional.one_hot(scaled[empty].argmax(dim=-1), V).to(probs.dtype)
    return probs
