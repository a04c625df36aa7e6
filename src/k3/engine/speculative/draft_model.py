"""Draft-model drafting: a smaller K3-architecture model with the target's tokenizer, run by its own
`LLMEngine` (prefix caching on) and decoding greedily.

Each round, every drafting request is added to the draft engine with its whole sequence as the prompt
and k tokens to generate. The draft engine's prefix cache holds the state at the end of the previous
round's prompt and at the end of its drafts, so it computes only the tokens verified since (the
accepted drafts and the token after them) and the k drafts: its state never needs undoing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from k3.engine.config import EngineConfig
from k3.engine.detokenize import usable_vocab
from k3.engine.engine import LLMEngine
from k3.engine.request import SamplingParams


@dataclass(frozen=True)
class DraftTarget:
    """What a draft model must match of the engine it drafts for, known before that engine is built."""
    usable_vocab: int            # ids the target may emit
    config: EngineConfig         # the target's batch and cache settings
    compute_dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, model, config: EngineConfig, tokenizer=None) -> "DraftTarget":
        device = next(iter(model.parameters()), torch.empty(0)).device
        return cls(usable_vocab(model.config.vocab_size, tokenizer), config, model.compute_dtype, device)


class DraftModelProposer:
    def __init__(self, engine):
        self.engine = engine
        self._rounds = 0

    @classmethod
    def for_target(cls, model, target: DraftTarget) -> "DraftModelProposer":
        """model: a checkpoint path or a loaded model; target: the engine it drafts for."""
        if isinstance(model, (str, Path)):
            from k3.model.weights import load_model

            if not (Path(model) / "config.json").is_file():
                raise ValueError(f"speculative_config.model: {model} is not a checkpoint directory (no config.json)")
            model = load_model(model, dtype=target.compute_dtype, device=target.device)
        vocab = model.config.vocab_size
        if vocab < target.usable_vocab:
            raise ValueError(f"speculative_config.model: the draft model's vocabulary ({vocab:,} ids) is smaller than "
                             f"the target's ({target.usable_vocab:,}); a drafter needs the target's tokenizer")
        settings = target.config   # the draft engine's batch and cache as the target's; no offload, no drafts
        engine = LLMEngine(model, EngineConfig(
            max_num_seqs=settings.max_num_seqs, max_num_batched_tokens=settings.max_num_batched_tokens,
            cache_memory=settings.cache_memory, block_size=settings.block_size))
        engine.sampler.sampleable = min(engine.usable_vocab, target.usable_vocab)   # propose what the target may emit
        return cls(engine)

    def propose(self, items: list[tuple[list[int], int]]) -> list[list[int]]:
        """(token ids, k) per request -> its drafts (fewer, or none, where the draft engine cannot hold it)."""
        self._rounds += 1
        ids = {}
        for i, (tokens, k) in enumerate(items):
            try:
                ids[self.engine.add_request(tokens, SamplingParams(max_tokens=k, temperature=0.0, ignore_eos=True),
                                            request_id=f"draft-{self._rounds}-{i}")] = i
            except ValueError:   # longer than the draft engine holds: that request decodes plainly
                continue
        drafts: list[list[int]] = [[] for _ in items]
        while self.engine.has_unfinished():
            for out in self.engine.step():
                if out.finished and out.request_id in ids and out.finish_reason == "length":
                    drafts[ids[out.request_id]] = list(out.token_ids)
        return drafts
