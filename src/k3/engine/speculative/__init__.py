"""Speculative decoding: drafts from prompt lookup or a draft model, verified by the target in one
window per request (`k3.ops.speculative`), with drafting that backs off where it is not accepted."""

from k3.engine.speculative.config import SpeculativeConfig
from k3.engine.speculative.drafter import Drafter

__all__ = ["Drafter", "SpeculativeConfig"]
