"""Logit processing and sampling for a batch of rows, each with its own parameters, in a few tensor ops
on the logits' device: penalties, temperature, top-k/top-p/min-p, seeded draws, log-probabilities.

Randomness is counter-based: row i's uniform for vocabulary entry v is a hash of (seed_i, counter_i, v)
in integer tensor ops, so a seeded request draws the same tokens on any device and whatever its
batchmates, without a generator object per request. A draw is an exponential race (Gumbel-max):
argmax(filtered logits - log E), E = -log1p(-u) ~ Exp(1), which picks token v with probability
softmax(filtered)_v. `apply_penalties` and `filter_logits` are the per-row references the batched
forms are tested against.
"""

from __future__ import annotations

import functools
import math

import torch

GREEDY_BELOW = 1e-5
_M32 = 0xFFFFFFFF
_MUL = 0x45D9F3B   # < 2**27: products of 32-bit values stay inside int64


def apply_penalties(logits: torch.Tensor, prompt_ids: list[int], output_ids: list[int], repetition: float,
                    presence: float, frequency: float) -> torch.Tensor:
    """logits [V] fp32 -> penalised copy. Repetition (HF/vLLM) covers prompt and output tokens;
    presence and frequency (OpenAI) cover output tokens only."""
    logits = logits.clone()
    if repetition != 1.0:
        seen = torch.tensor(sorted(set(prompt_ids) | set(output_ids)), dtype=torch.long, device=logits.device)
        if seen.numel():
            vals = logits[seen]
            logits[seen] = torch.where(vals > 0, vals / repetition, vals * repetition)
    if (presence or frequency) and output_ids:
        ids = torch.tensor(output_ids, dtype=torch.long, device=logits.device)
        counts = torch.bincount(ids, minlength=logits.numel()).to(logits.dtype)
        logits -= frequency * counts + presence * (counts > 0).to(logits.dtype)
    return logits


def apply_penalties_batched(logits: torch.Tensor, prompt_ids: list[list[int]], output_ids: list[list[int]],
                            repetition: list[float], presence: list[float], frequency: list[float]) -> torch.Tensor:
    """logits [n, V] fp32 -> penalised copy; one list entry per row (as `apply_penalties`)."""
    n, V = logits.shape
    dev = logits.device
    out = logits.clone()
    if any(r != 1.0 for r in repetition):
        rows = [i for i in range(n) for _ in range(len(prompt_ids[i]) + len(output_ids[i]))]
        cols = [t for i in range(n) for t in (*prompt_ids[i], *output_ids[i])]
        seen = torch.zeros((n, V), dtype=torch.bool, device=dev)
        seen[torch.tensor(rows, dtype=torch.long, device=dev), torch.tensor(cols, dtype=torch.long, device=dev)] = True
        rep = torch.tensor(repetition, dtype=out.dtype, device=dev).unsqueeze(1)
        out = torch.where(seen & (rep != 1.0), torch.where(out > 0, out / rep, out * rep), out)
    if any(presence) or any(frequency):
        rows = [i for i in range(n) for _ in output_ids[i]]
        cols = [t for i in range(n) for t in output_ids[i]]
        counts = torch.zeros((n, V), dtype=out.dtype, device=dev)
        if cols:
            idx = (torch.tensor(rows, dtype=torch.long, device=dev), torch.tensor(cols, dtype=torch.long, device=dev))
            counts.index_put_(idx, torch.ones(len(cols), dtype=out.dtype, device=dev), accumulate=True)
        pres = torch.tensor(presence, dtype=out.dtype, device=dev).unsqueeze(1)
        freq = torch.tensor(frequency, dtype=out.dtype, device=dev).unsqueeze(1)
        out = out - (freq * counts + pres * (counts > 0).to(out.dtype))
    return out


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """logits [V] (already divided by temperature) -> logits with excluded tokens at -inf."""
    if 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Keep a token when the mass before it is below top_p: the token crossing the threshold stays.
        drop = (probs.cumsum(-1) - probs) >= top_p
        logits = logits.clone()
        logits[order[drop]] = float("-inf")
    if min_p > 0.0:
        probs = torch.softmax(logits, dim=-1)
        logits = logits.masked_fill(probs < min_p * probs.max(), float("-inf"))
    return logits


def filter_logits_batched(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                          min_p: torch.Tensor) -> torch.Tensor:
    """logits [n, V]; top_k [n] long (<= 0 off), top_p [n] (1 off), min_p [n] (0 off) -> filtered [n, V].
    One sort serves top-k and top-p for every row."""
    n, V = logits.shape
    use_k, use_p = (top_k > 0) & (top_k < V), top_p < 1.0
    out = logits
    if bool((use_k | use_p).any()):
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        if bool(use_k.any()):
            kth = sorted_logits.gather(1, (torch.where(use_k, top_k, V) - 1).unsqueeze(1))
            out = out.masked_fill(out < kth, float("-inf"))
            sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
        if bool(use_p.any()):
            probs = torch.softmax(sorted_logits, dim=-1)
            drop = ((probs.cumsum(-1) - probs) >= top_p.unsqueeze(1)) & use_p.unsqueeze(1)
            out = out.masked_fill(torch.zeros_like(drop).scatter(1, order, drop), float("-inf"))
    if bool((min_p > 0).any()):
        probs = torch.softmax(out, dim=-1)
        out = out.masked_fill(probs < min_p.unsqueeze(1) * probs.max(dim=-1, keepdim=True).values, float("-inf"))
    return out


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (bijective) on int64 tensors holding values in [0, 2^32)."""
    x = ((x >> 16) ^ x) * _MUL & _M32
    x = ((x >> 16) ^ x) * _MUL & _M32
    return (x >> 16) ^ x


@functools.lru_cache(maxsize=8)
def _vocab_keys(V: int, device: torch.device) -> torch.Tensor:
    return _mix32(torch.arange(V, dtype=torch.long, device=device) ^ 0x9E3779B9)


def hashed_uniform(seeds: torch.Tensor, counters: torch.Tensor, V: int, ids: torch.Tensor | None = None
                   ) -> torch.Tensor:
    """seeds, counters [n] int64 -> fp32 uniforms in (0, 1], each a function of (seed, counter, v) only:
    [n, V] for every vocabulary entry, or [n, C] for the entries `ids` [n, C] (the same values)."""
    key = _mix32(_mix32(_mix32(counters & _M32) ^ ((seeds >> 32) & _M32)) ^ (seeds & _M32))
    salt = _mix32(key ^ 0x85EBCA6B)
    vocab = _vocab_keys(V, seeds.device)
    per_entry = vocab.unsqueeze(0) if ids is None else vocab[ids]
    h = _mix32(_mix32(key.unsqueeze(1) ^ per_entry) ^ salt.unsqueeze(1))
    return (h.to(torch.float32) + 0.5) * 2.0 ** -32


CANDIDATES = 1024   # top-k/top-p rows draw among their best 1024 tokens when those hold everything kept


def _candidates(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor):
    """The same filtering as `filter_logits_batched`, on each row's CANDIDATES best tokens only:
    -> (filtered values [n, C], their token ids [n, C]), or None when a row may keep more than that
    (no top-k within C and no top-p, or a top-p mass the candidates do not reach)."""
    n, V = scaled.shape
    C = min(V, CANDIDATES)
    use_k, use_p = (top_k > 0) & (top_k < V), top_p < 1.0
    if C == V or not bool((use_k & (top_k <= C) | use_p).all()):
        return None
    vals, ids = torch.topk(scaled, C, dim=-1)                                      # sorted, descending
    if bool(use_k.any()):
        vals = vals.masked_fill(use_k.unsqueeze(1) & (vals < vals.gather(1, (top_k.clamp(1, C) - 1).unsqueeze(1))),
                                float("-inf"))
    if bool(use_p.any()):
        # top-p normalises over what top-k left: the candidates when top-k is on, else the whole vocabulary.
        lse = torch.where(use_k, torch.logsumexp(vals, -1), torch.logsumexp(scaled, -1)).unsqueeze(1)
        probs = torch.exp(vals - lse)
        if bool((use_p & ~use_k & (probs.sum(-1) < top_p)).any()):
            return None
        vals = vals.masked_fill(((probs.cumsum(-1) - probs) >= top_p.unsqueeze(1)) & use_p.unsqueeze(1), float("-inf"))
    if bool((min_p > 0).any()):
        probs = torch.softmax(vals, dim=-1)
        vals = vals.masked_fill(probs < min_p.unsqueeze(1) * probs.max(dim=-1, keepdim=True).values, float("-inf"))
    return vals, ids


def sample_rows(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                min_p: torch.Tensor, seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """logits [n, V] fp32 (penalised); per-row parameters [n] -> token ids [n] long. Temperatures below
    1e-5 are greedy (first maximum): dividing by them would overflow to inf and make the softmax NaN."""
    greedy = temperature < GREEDY_BELOW
    best = logits.argmax(dim=-1)
    if bool(greedy.all()):
        return best
    t = torch.where(greedy, torch.ones_like(temperature), temperature).unsqueeze(1)
    # Extreme penalties or temperatures can push logits to +-inf; +inf becomes the largest float
    # (that token dominates), NaN is dropped, so the race below stays a draw from a distribution.
    scaled = torch.nan_to_num(logits / t, nan=float("-inf"), posinf=torch.finfo(logits.dtype).max)
    V = logits.shape[1]
    few = _candidates(scaled, top_k, top_p, min_p)
    if few is None:
        filtered = filter_logits_batched(scaled, top_k, top_p, min_p)
        exp = -torch.log1p(-hashed_uniform(seeds, counters, V))
        drawn = (filtered - torch.log(exp)).argmax(dim=-1)
    else:   # the same race over the same noise, on the few tokens that can win
        filtered, ids = few
        exp = -torch.log1p(-hashed_uniform(seeds, counters, V, ids))
        drawn = ids.gather(1, (filtered - torch.log(exp)).argmax(dim=-1, keepdim=True)).squeeze(1)
    nothing_left = ~torch.isfinite(filtered).any(dim=-1)
    drawn = torch.where(nothing_left, scaled.argmax(dim=-1), drawn)
    return torch.where(greedy, best, drawn)


def top_logprobs(logits: torch.Tensor, token_id: int, n: int) -> tuple[float, dict[int, float]]:
    """Raw (unprocessed) log-probabilities of one row: the chosen token's, and the n most likely tokens'."""
    (lp,), (top,) = top_logprobs_batched(logits.unsqueeze(0), torch.tensor([token_id], device=logits.device), [n])
    return lp, top


def top_logprobs_batched(logits: torch.Tensor, token_ids: torch.Tensor, ns: list[int]
                         ) -> tuple[list[float], list[dict[int, float]]]:
    """logits [m, V] raw; token_ids [m]; ns the number of alternatives per row -> (each row's chosen
    log-probability, each row's top-n {token: logprob}). Tokens a constraint masked out (logprob -inf)
    are never among the top: a row with fewer than n allowed tokens lists fewer (JSON has no -inf)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    chosen = logp.gather(1, token_ids.view(-1, 1)).squeeze(1).tolist()
    k = max(ns, default=0)
    if not k:
        return chosen, [{} for _ in ns]
    values, ids = torch.topk(logp, k, dim=-1)
    values, ids = values.tolist(), ids.tolist()
    return chosen, [{t: v for t, v in zip(ids[i][:n], values[i][:n]) if v != -math.inf} for i, n in enumerate(ns)]
