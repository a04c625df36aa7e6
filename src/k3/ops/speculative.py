"""Verifying speculative drafts against the target model's distributions: exact for greedy requests, and
standard rejection sampling for sampled ones, so the tokens emitted are distributed as the target's.

A window has T = k + 1 rows: row j is the target's distribution for the position of draft j (row k for
the token after the last draft). Drafts come from a deterministic drafter (prompt lookup, or a draft
model decoding greedily), so the proposal q is a point mass on each draft: draft j is accepted with
probability min(1, p_j(d_j) / q_j(d_j)) = p_j(d_j); at the first rejection the token is drawn from the
residual max(0, p_j - q_j) ∝ p_j without d_j. P(emit x) = p(d) [x = d] + (1 - p(d)) p(x) / (1 - p(d)) [x != d]
= p(x): the target's distribution, whatever the drafts. If every draft is accepted, row k gives a bonus token.
Draws are counter-based (`k3.ops.sampling.hashed_uniform`): row j uses counter `drawn + j`, the same
noise the plain sampler would use for that token, and the acceptance tests their own salted stream.
"""

from __future__ import annotations

import torch

from k3.ops.sampling import hashed_uniform

ACCEPT_SALT = 0x5BD1E9955BD1E995 & (2 ** 63 - 1)   # a separate stream for acceptance tests


def verify_greedy(logits: torch.Tensor, drafts: list[int]) -> list[int]:
    """logits [k+1, V] -> the tokens to emit: the drafts that equal their row's first maximum, then the
    first maximum of the first row that disagrees (or of row k). Exactly greedy decoding's tokens."""
    best = logits.argmax(dim=-1).tolist()
    out: list[int] = []
    for j, d in enumerate(drafts):
        if best[j] != d:
            break
        out.append(d)
    out.append(best[len(out)])
    return out


def verify_sampled(probs: torch.Tensor, drafts: list[int], seed: int, drawn: int) -> list[int]:
    """probs [k+1, V] fp32: the target's (processed) distribution per row; drawn: tokens the request has
    drawn before this window -> the tokens to emit (accepted drafts, then one drawn token)."""
    k, V = len(drafts), probs.shape[-1]
    dev = probs.device
    out: list[int] = []
    if k:
        ids = torch.tensor(drafts, dtype=torch.long, device=dev)
        counters = drawn + torch.arange(k, device=dev)
        u = hashed_uniform(torch.full((k,), seed ^ ACCEPT_SALT, dtype=torch.long, device=dev), counters, V,
                           ids.unsqueeze(1)).squeeze(1)
        accept = (u < probs[:k].gather(1, ids.unsqueeze(1)).squeeze(1)).tolist()
        for j, ok in enumerate(accept):
            if not ok:
                break
            out.append(drafts[j])
    r = len(out)
    residual = probs[r].clone()
    if r < k:
        residual[drafts[r]] = 0.0
        if not bool((residual > 0).any()):   # p(d) rounded below 1 with nothing else left: d it is
            return out + [drafts[r]]
    out.append(draw(residual, seed, drawn + r))
    return out


def draw(weights: torch.Tensor, seed: int, counter: int) -> int:
    """One token with probability proportional to weights [V] (>= 0, not all 0), from the plain
    sampler's noise for (seed, counter): an exponential race, argmax(log w - log E)."""
    V = weights.shape[-1]
    dev = weights.device
    u = hashed_uniform(torch.tensor([seed], dtype=torch.long, device=dev),
                       torch.tensor([counter], dtype=torch.long, device=dev), V)[0]
    race = torch.log(weights) - torch.log(-torch.log1p(-u))
    return int(race.argmax())
