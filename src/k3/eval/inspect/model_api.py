"""`--model k3/PATH`: the in-process k3 engine as an Inspect AI model provider (no server).

PATH is a checkpoint directory, or `default` for the bundled model. `-M` model args go to `k3.LLM`
(`cache_memory`, `max_num_seqs`, `memory_budget`, ...). Each generate call is one `LLM.chat`: K3's chat
format, reasoning and tool calls parsed, `max_tokens`/`temperature`/`top_p`/`seed` from Inspect's
GenerateConfig, and reasoning effort and `thinking` (`-M thinking=false`) honoured.

The model is built, and every call runs, on one EngineThread (calls take turns, as the engine is not
thread-safe); engine/thread.py says why one thread, not asyncio's pool.
Evaluations that want batching across samples serve the model (`k3 serve`) and use Inspect's
OpenAI-compatible provider instead."""

from __future__ import annotations

import asyncio
from typing import Any

from inspect_ai.model import (ChatCompletionChoice, GenerateConfig, ModelAPI, ModelInfo, ModelOutput, ModelUsage,
                              modelapi, set_model_info)

from k3.engine.thread import EngineThread
from k3.eval.inspect.messages import from_k3, to_k3, tool_choice_to_k3, tools_to_k3

STOP = {"stop": "stop", "length": "max_tokens", "abort": "unknown", "error": "unknown"}


@modelapi(name="k3")
class K3ModelAPI(ModelAPI):
    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig = GenerateConfig(), thinking: bool | None = None, **llm_kwargs: Any):
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, config=config)
        from k3 import LLM
        from k3.models import resolve_model

        path = resolve_model(model_name)
        self.thread = EngineThread()
        self.llm = self.thread.call(LLM, str(path), **llm_kwargs)
        if self.llm.tokenizer is None:
            raise ValueError(f"{path}: no tokenizer (tiktoken.model) beside the checkpoint; Inspect needs chat")
        # Inspect looks a model's facts up by name, and for a name it does not know it builds the provider
        # again (a second copy of the weights); registered here, the lookup finds them.
        set_model_info(f"k3/{model_name}", ModelInfo(organization="Moonshot AI (K3 architecture, run by k3)",
                                                     context_length=self.llm.engine.max_model_len))
        self.thinking = self.llm.tokenizer.thinking if thinking is None else thinking   # None: the model's default

    def max_connections(self) -> int:
        return 1

    async def count_text_tokens(self, text: str) -> int:
        """With K3's own tokenizer (Inspect's default estimate would fetch an OpenAI encoding)."""
        return len(self.llm.tokenizer.encode(text))

    def count_chat_tokens(self, messages: list[dict]) -> int:
        """The prompt length of a conversation in K3's chat format (the constraint sweep sizes filler with it)."""
        from k3.chat.render import render

        return len(self.llm.tokenizer.encode_segments(render(messages, thinking=self.thinking)))

    async def generate(self, input, tools, tool_choice, config: GenerateConfig) -> ModelOutput:
        from k3.engine.request import SamplingParams

        params = SamplingParams(max_tokens=config.max_tokens or 1024,
                                temperature=1.0 if config.temperature is None else config.temperature,
                                top_p=config.top_p or 1.0, seed=config.seed,
                                stop=tuple(config.stop_seqs or ()))
        messages, k3_tools = to_k3(input), tools_to_k3(tools) or None
        choice = tool_choice_to_k3(tool_choice) if k3_tools else None
        effort = config.reasoning_effort if config.reasoning_effort in ("low", "medium", "high") else None
        future = self.thread.submit(self.llm.chat, messages, params, tools=k3_tools, tool_choice=choice,
                                     thinking=self.thinking, thinking_effort=effort)
        out = (await asyncio.wrap_future(future))[0]
        message = from_k3(out.message)
        reason = "tool_calls" if message.tool_calls else STOP.get(out.output.finish_reason, "unknown")
        prompt, completion = len(out.output.prompt_token_ids), len(out.output.token_ids)
        return ModelOutput(model=self.model_name, choices=[ChatCompletionChoice(message=message, stop_reason=reason)],
                           usage=ModelUsage(input_tokens=prompt, output_tokens=completion,
                                            total_tokens=prompt + completion),
                           error=out.output.error)
