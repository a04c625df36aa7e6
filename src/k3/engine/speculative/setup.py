"""Building an engine with the drafter its speculative_config asks for: the drafter is made first, from
what it must match of the engine (DraftTarget), and passed in."""

from __future__ import annotations

import logging

from k3.engine.config import EngineConfig
from k3.engine.engine import LLMEngine
from k3.engine.speculative.config import SpeculativeConfig
from k3.engine.speculative.draft_model import DraftModelProposer, DraftTarget
from k3.engine.speculative.drafter import Drafter
from k3.engine.speculative.ngram import NgramProposer

log = logging.getLogger("k3.engine")


def build_engine(model, config: EngineConfig | None = None, *, tokenizer=None) -> LLMEngine:
    """An LLMEngine for `model` with the drafter `config.speculative_config` describes (None: none)."""
    config = config or EngineConfig()
    return LLMEngine(model, config, tokenizer=tokenizer,
                     drafter=build_drafter(config.speculative_config, DraftTarget.of(model, config, tokenizer)))


def build_drafter(config: SpeculativeConfig | None, target: DraftTarget) -> Drafter | None:
    if config is None:
        return None
    if config.method == "ngram":
        proposer = NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
    else:
        proposer = DraftModelProposer.for_target(config.model, target)
    log.info("speculative decoding: %s", config.describe())
    return Drafter(config, proposer)
