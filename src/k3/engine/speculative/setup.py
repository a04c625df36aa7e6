"""Building the drafter an engine's speculative_config asks for."""

from __future__ import annotations

import logging

from k3.engine.speculative.config import SpeculativeConfig
from k3.engine.speculative.drafter import Drafter
from k3.engine.speculative.ngram import NgramProposer

log = logging.getLogger("k3.engine")


def build_drafter(config: SpeculativeConfig | None, engine) -> Drafter | None:
    if config is None:
        return None
    if config.method == "ngram":
        proposer = NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
    else:
        from k3.engine.speculative.draft_model import DraftModelProposer

        proposer = DraftModelProposer.for_target(config.model, engine)
    log.info("speculative decoding: %s", config.describe())
    return Drafter(config, proposer)
