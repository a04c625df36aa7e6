"""The inference engine: requests, the scheduler (decides, allocates), the runner (moves state, runs the
step), the batched sampler, KDA slots + paged MLA cache, and the loop that ties them."""

from k3.engine.config import EngineConfig
from k3.engine.engine import LLMEngine
from k3.engine.llm import LLM, ChatOutput
from k3.engine.request import RequestOutput, SamplingParams
from k3.engine.speculative.setup import build_engine

__all__ = ["LLM", "ChatOutput", "EngineConfig", "LLMEngine", "RequestOutput", "SamplingParams", "build_engine"]
