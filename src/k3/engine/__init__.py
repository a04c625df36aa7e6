"""The inference engine: requests, continuous-batching scheduler, KDA slots + paged MLA cache, sampling."""

from k3.engine.engine import LLMEngine
from k3.engine.llm import LLM, ChatOutput
from k3.engine.request import RequestOutput, SamplingParams

__all__ = ["LLM", "ChatOutput", "LLMEngine", "RequestOutput", "SamplingParams"]
