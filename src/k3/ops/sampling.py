"""Logit processing and sampling for one request's row: penalties, temperature, top-k/top-p/min-p.

Each request samples with its own torch.Generator, so seeded output does not depend on batchmates.
"""

from __future__ import annotations

import torch


def apply_penalties(logits: torch.Tensor, prompt_ids: list[int], output_ids: list[int], repetition: float,
                    presence: float, frequency: float) -> torch.Tensor:
    """logits [V] fp32 -> penalised copy. Repetition (HF/vLLM) covers prompt and output tokens;
    presence and frequency (OpenAI) cover output tokens only."""
    logits = logits.clone()
    if repetition != 1.0:
        seen = torch.tensor(sorted(set(prompt_ids) | set(output_ids)), dtype=torch.long)
        if seen.numel():
            vals = logits[seen]
            logits[seen] = torch.where(vals > 0, vals / repetition, vals * repetition)
    if (presence or frequency) and output_ids:
        counts = torch.bincount(torch.tensor(output_ids, dtype=torch.long), minlength=logits.numel()).to(logits.dtype)
        logits -= frequency * counts + presence * (counts > 0).to(logits.dtype)
    return logits


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


GREEDY_BELOW = 1e-5


def sample_token(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float,
                 generator: torch.Generator) -> int:
    """logits [V] fp32 (penalised) -> token id. Temperatures below 1e-5 are greedy (first maximum):
    dividing by them would overflow to inf and make the softmax NaN."""
    if temperature < GREEDY_BELOW:
        return int(torch.argmax(logits))
    # Extreme penalties or temperatures can push logits to +-inf; +inf becomes the largest float
    # (that token dominates), NaN is dropped, so the softmax below stays a distribution.
    scaled = torch.nan_to_num(logits / temperature, nan=float("-inf"), posinf=torch.finfo(logits.dtype).max)
    filtered = filter_logits(scaled, top_k, top_p, min_p)
    if not bool(torch.isfinite(filtered).any()):
        return int(torch.argmax(scaled))
    probs = torch.softmax(filtered, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def top_logprobs(logits: torch.Tensor, token_id: int, n: int) -> tuple[float, dict[int, float]]:
    """Raw (unprocessed) log-probabilities: the chosen token's, and the n most likely tokens'."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    top = {}
    if n:
        values, ids = torch.topk(logp, n)
        top = {int(i): float(v) for i, v in zip(ids, values)}
    return float(logp[token_id]), top
