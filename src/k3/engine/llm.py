"""k3.LLM: the offline API, shaped like vLLM's `LLM(...).generate(prompts, sampling_params)`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from k3.chat import K3Tokenizer, ParsedMessage, parse_message, render
from k3.chat.tokenizer import VOCAB_FILE
from k3.chat.tools import tool_names
from k3.chat.images import image_sources
from k3.config.vision import MediaConfig, load_media_config
from k3.engine.config import EngineConfig
from k3.engine.image_prompts import Prompt, dict_prompt, prepare_all
from k3.engine.request import RequestOutput, SamplingParams
from k3.engine.speculative.setup import build_engine


@dataclass(frozen=True)
class ChatOutput:
    output: RequestOutput        # token ids, finish reason, text
    message: ParsedMessage       # reasoning_content, content, tool_calls, problems


class LLM:
    """Load a K3 checkpoint (or wrap a loaded model) and generate with continuous batching.

    model: a checkpoint folder, "default" (the bundled model), a downloaded repo id, or a loaded model.
    config: a k3.EngineConfig; its fields may be given as keywords instead (vLLM's names: max_num_seqs,
    cache_memory="2GiB", memory_budget="24GB", max_model_len, enable_prefix_caching, speculative_config,
    trunk="int8", vision=False, ...), or as keywords over a config. Each field's meaning is on
    k3.EngineConfig, and every one is checked before the model loads.
    tokenizer: a K3Tokenizer, a directory with tiktoken.model, or None to use the checkpoint's own
    tiktoken.model when it has one. With a tokenizer, prompts may be text and outputs carry `text`.
    """

    def __init__(self, model, config: EngineConfig | None = None, *, tokenizer=None, **settings):
        if config is not None and not isinstance(config, EngineConfig):
            raise TypeError(f"LLM(model, config): config is a k3.EngineConfig, got {type(config).__name__}; "
                            "give settings such as dtype= as keywords")
        config = config or EngineConfig()
        if settings:
            config = config.replace(**settings)
        self.config, self.media, self.image_limits = config, MediaConfig(), config.image_limits
        if isinstance(model, torch.nn.Module):
            self.model = model
        else:
            from k3.model.weights import load_model
            from k3.models import resolve_model

            model = resolve_model(model)   # a path, "default", a downloaded repo id (k3/models.py)
            self.model = load_model(model, dtype=config.dtype, device=config.device, memory_budget=config.memory_budget,
                                    state_bytes=config.cache_memory, trunk=config.trunk, vision=config.vision)
            self.media = load_media_config(model)
            if tokenizer is None and (Path(model) / VOCAB_FILE).is_file():
                tokenizer = model
        if getattr(self.model, "vision", None) is not None:
            self.model.vision_dtype = config.vision_dtype
        if str(config.device).startswith("cpu"):
            from k3.ops.dispatch import prepare

            prepare()   # a first-use kernel build happens here, while loading, not inside the first request's TTFT
        if isinstance(tokenizer, (str, Path)):
            tokenizer = K3Tokenizer.load(tokenizer)
        self.tokenizer = tokenizer
        self.engine = build_engine(self.model, config, tokenizer=tokenizer)

    @property
    def capacity(self):
        return self.engine.capacity

    def generate(self, prompts=None, sampling_params: SamplingParams | Sequence[SamplingParams] | None = None, *,
                 save_state=None, resume_from=None) -> list[RequestOutput]:
        """prompts: text, a token-id list, vLLM's {"prompt": TEXT, "multi_modal_data": {"image": IMAGES}} (each image's
        place marked <|kimi_image_placeholder|>), or a list of those -> one finished RequestOutput per prompt, in order.

        save_state: a path (or one per prompt): when a request finishes, its state (KDA, MLA cache, token
        ids) is written there. resume_from: a saved state file (or one per prompt); its tokens are not
        computed again. With resume_from and no prompts, generation continues exactly where it stopped."""
        finals: dict[str, RequestOutput] = {}
        order: list[str] = []
        for out in self._run(prompts, sampling_params, order, save_state, resume_from):
            if out.finished:
                finals[out.request_id] = out
        return [finals[r] for r in order]

    def stream(self, prompts=None, sampling_params: SamplingParams | Sequence[SamplingParams] | None = None, *,
               save_state=None, resume_from=None) -> Iterator[RequestOutput]:
        """Yields a RequestOutput each time a request gains a token or finishes. Closing the
        iterator early aborts the requests still running. save_state/resume_from as in `generate`."""
        yield from self._run(prompts, sampling_params, [], save_state, resume_from)

    def _run(self, prompts, sampling_params, order: list[str], save_state=None, resume_from=None
             ) -> Iterator[RequestOutput]:
        if self.engine.driver is not None and self.engine.driver.running:
            raise RuntimeError("this LLM's engine is driven by a server (AsyncEngine) in another thread; send "
                               "requests through it, or shut it down first")
        states = self._load_states(resume_from)
        if prompts is None and states:
            prompts = [s.token_ids + s.pending_ids for s in states]
        prompt_list = self._prompt_list(prompts)
        params = self._params_list(sampling_params, len(prompt_list))
        saves = _per_prompt(save_state, len(prompt_list), "save_state")
        states = _per_prompt(states if states else None, len(prompt_list), "resume_from")
        try:
            for prompt, p, save, state in zip(prompt_list, params, saves, states):
                order.append(self.engine.add_request(prompt.ids, p, resume_state=state, images=prompt.images,
                                                     save_state_path=None if save is None else str(save)))
            pending = set(order)
            while pending:
                for out in self.engine.step():
                    if out.request_id in pending:
                        if out.finished:
                            pending.discard(out.request_id)
                        yield out
        finally:
            for request_id in order:
                self.engine.abort(request_id)

    def chat(self, conversations, sampling_params: SamplingParams | Sequence[SamplingParams] | None = None, *,
             tools: list[dict] | None = None, thinking: bool | None = None, thinking_effort: str | None = None,
             tool_choice=None, response_format: dict | None = None) -> list[ChatOutput]:
        """One conversation (a list of messages) or a list of them -> rendered as K3 XTML, generated,
        and parsed into reasoning, content and tool calls (with any problems the parser found).
        thinking: whether answers open with a think channel; None: the model's default (on for K3, off
        for a model trained without the chat format, such as the bundled one)."""
        tok = self._need_tokenizer("chat")
        thinking = tok.thinking if thinking is None else thinking
        tools, tool_choice = named_choice(tools, tool_choice)
        convs = [conversations] if conversations and isinstance(conversations[0], dict) else list(conversations)
        prompts = []
        for c in convs:
            images = prepare_all(image_sources(c), self.media, self.image_limits) or None
            prompts.append(Prompt(tok.encode_segments(render(c, tools=tools, thinking=thinking, images=images,
                                                             thinking_effort=thinking_effort, tool_choice=tool_choice,
                                                             response_format=response_format)), images))
        outs = self.generate(prompts, chat_constrained(sampling_params, response_format, thinking, len(prompts),
                                                       tools, tool_choice))
        return [ChatOutput(o, parse_message(tok, o.token_ids, thinking=thinking, tools=tool_names(tools)))
                for o in outs]

    def _load_states(self, resume_from) -> list:
        if resume_from is None:
            return []
        from k3.engine.state_file import load_state

        paths = [resume_from] if isinstance(resume_from, (str, Path)) else list(resume_from)
        return [load_state(p, self.engine.fingerprint, self.model.compute_dtype) for p in paths]

    def _need_tokenizer(self, what: str):
        if self.tokenizer is None:
            raise ValueError(f"{what}: needs a tokenizer; pass tokenizer=DIR (with tiktoken.model) or token ids")
        return self.tokenizer

    def _prompt_list(self, prompts) -> list[Prompt]:
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        if isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], int):
            return [Prompt(list(prompts))]
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise ValueError("prompts: expected text, a token-id list, a dict with multi_modal_data, or a "
                             "non-empty list of those")
        return [p if isinstance(p, Prompt) else self._one_prompt(p) for p in prompts]

    def _one_prompt(self, p) -> Prompt:
        if isinstance(p, dict):
            return dict_prompt(self._need_tokenizer("dict prompts"), p, self.media, self.image_limits)
        if isinstance(p, str):
            return Prompt(self._need_tokenizer("text prompts").encode(p, special=True))
        return Prompt(list(p))

    @staticmethod
    def _params_list(sampling_params, n: int) -> list[SamplingParams]:
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            return [sampling_params or SamplingParams()] * n
        params = list(sampling_params)
        if len(params) != n:
            raise ValueError(f"sampling_params: {len(params)} given for {n} prompts")
        return params


def _per_prompt(value, n: int, name: str) -> list:
    if value is None:
        return [None] * n
    values = [value] if isinstance(value, (str, Path)) else list(value)
    if len(values) != n:
        raise ValueError(f"{name}: {len(values)} given for {n} prompts")
    return values


def chat_constrained(sampling_params, response_format, thinking: bool, n: int, tools=None, tool_choice=None):
    """The chat's SamplingParams with `response_format` (json_object / json_schema) enforced on the
    response channel, or the tools' calls (the server's rule, `constrains_calls`), unless they carry
    structured_outputs of their own. A format with required calls is an error, as on the server."""
    from dataclasses import replace

    from k3.engine.structured import StructuredOutputs
    from k3.engine.structured.params import constrains_calls

    frame = "think" if thinking else "response"
    so = StructuredOutputs.from_response_format(response_format, frame)
    if constrains_calls(tools, tool_choice, shaped=so is not None):
        if so is not None:
            raise ValueError("give one constraint, not response_format and tools")
        so = StructuredOutputs.from_tools(tools, tool_choice, frame)
    if so is None:
        return sampling_params
    params = sampling_params if isinstance(sampling_params, (list, tuple)) else [sampling_params or SamplingParams()] * n
    return [p if p.structured_outputs is not None else replace(p, structured_outputs=so) for p in params]


def named_choice(tools, tool_choice):
    """A named tool_choice ({"type": "function", "function": {"name": N}}) -> (that tool only, "required")."""
    from k3.chat.tools import tool_name
    from k3.chat.validate import check_tool_choice

    name = check_tool_choice(tool_choice)
    if name is None:
        return tools, tool_choice
    chosen = [t for t in tools or [] if tool_name(t) == name]
    if not chosen:
        raise ValueError(f"tool_choice names {name!r}, which is not among the tools")
    return chosen, "required"

