"""Requests and their parameters: plain data, validated on construction (vLLM's names and meanings)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

MAX_LOGPROBS = 20


def _fail(name: str, msg: str) -> None:
    raise ValueError(f"SamplingParams.{name}: {msg}")


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0          # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0                    # 0 or -1 = off
    min_p: float = 0.0
    seed: int | None = None           # reproducible per request, whatever its batchmates
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()        # strings; need a tokenizer to detokenize
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logprobs: int | None = None       # top-n alternatives per token (0 = the chosen token only)
    prompt_logprobs: int | None = None  # also score every prompt token (top-n alternatives; 0 = its own only)
    ignore_eos: bool = False
    skip_special_tokens: bool = True  # leave special tokens out of `text`
    structured_outputs: object = None  # a StructuredOutputs (or vLLM's dict for one): constrained decoding
    logit_bias: object = None         # {token id: bias in [-100, 100]} added to the logits (OpenAI's, vLLM's)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if isinstance(self.structured_outputs, dict):
            from k3.engine.structured import StructuredOutputs

            object.__setattr__(self, "structured_outputs", StructuredOutputs.from_request(self.structured_outputs))
        if isinstance(self.logit_bias, dict):   # kept as sorted pairs: the params stay hashable and comparable
            object.__setattr__(self, "logit_bias", tuple(sorted(self.logit_bias.items(), key=lambda kv: repr(kv[0]))))
        _validate(self)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _validate(p: SamplingParams) -> None:
    if not _is_int(p.max_tokens) or p.max_tokens < 1:
        _fail("max_tokens", f"must be an integer >= 1, got {p.max_tokens!r}")
    if not _is_num(p.temperature) or p.temperature < 0:
        _fail("temperature", f"must be a finite number >= 0, got {p.temperature!r}")
    if not _is_num(p.top_p) or not 0 < p.top_p <= 1:
        _fail("top_p", f"must be in (0, 1], got {p.top_p!r}")
    if not _is_int(p.top_k) or p.top_k < -1:
        _fail("top_k", f"must be an integer >= 1, or 0/-1 for no limit, got {p.top_k!r}")
    if not _is_num(p.min_p) or not 0 <= p.min_p <= 1:
        _fail("min_p", f"must be in [0, 1], got {p.min_p!r}")
    if p.seed is not None and not _is_int(p.seed):
        _fail("seed", f"must be an integer or None, got {p.seed!r}")
    if not all(_is_int(t) and t >= 0 for t in p.stop_token_ids):
        _fail("stop_token_ids", f"must be non-negative integers, got {p.stop_token_ids!r}")
    if not all(isinstance(s, str) and s for s in p.stop):
        _fail("stop", f"must be non-empty strings, got {p.stop!r}")
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(p, name)
        if not _is_num(v) or not -2 <= v <= 2:
            _fail(name, f"must be in [-2, 2], got {v!r}")
    if not _is_num(p.repetition_penalty) or p.repetition_penalty <= 0:
        _fail("repetition_penalty", f"must be > 0, got {p.repetition_penalty!r}")
    for name in ("logprobs", "prompt_logprobs"):
        v = getattr(p, name)
        if v is not None and (not _is_int(v) or not 0 <= v <= MAX_LOGPROBS):
            _fail(name, f"must be None or an integer in 0..{MAX_LOGPROBS}, got {v!r}")
    if p.logit_bias is not None:
        _check_bias(p.logit_bias)
    for name in ("ignore_eos", "skip_special_tokens"):
        if not isinstance(getattr(p, name), bool):
            _fail(name, f"must be a bool, got {getattr(p, name)!r}")


MAX_BIASED = 1024


def _check_bias(bias) -> None:
    if not isinstance(bias, tuple) or len(bias) > MAX_BIASED:
        _fail("logit_bias", f"must be a mapping of at most {MAX_BIASED} token ids to biases")
    for pair in bias:
        if not (isinstance(pair, tuple) and len(pair) == 2 and _is_int(pair[0]) and pair[0] >= 0):
            _fail("logit_bias", f"keys must be token ids (non-negative integers), got {pair!r}")
        if not _is_num(pair[1]) or not -100 <= pair[1] <= 100:
            _fail("logit_bias", f"biases must be numbers in [-100, 100], got {pair[1]!r} for token {pair[0]}")


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: dict[int, float]   # the n most likely tokens at this step -> logprob


@dataclass
class Request:
    """One request's state. Each field has one writer: the engine's admission (construction), the
    scheduler (status, num_computed, last_scheduled, resident_since, prefix_cached, snapshot_at,
    initial_state), the step's output update (output_ids and all_ids through `append_output`, logprobs,
    prompt_logprobs, first_token_time, finish_reason, error, warning; detok and constraint advance as
    tokens are appended) and the drafter (draft_ids)."""
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: int
    seed: int                        # this request's draws depend on (seed, tokens drawn) only
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob | None] | None = None  # per prompt token; None where not scored
    status: Status = Status.WAITING
    finish_reason: str | None = None
    error: str | None = None
    detok: object | None = None       # OutputText when the engine has a tokenizer
    num_computed: int = 0            # tokens whose state is in the cache
    last_scheduled: int = -1         # step number, for round-robin fairness
    first_token_time: float | None = None
    initial_state: object | None = None     # SequenceState to resume from (imported at admission)
    save_state_path: str | None = None       # write the state here when the request finishes
    resident_since: int = 0                  # step its state last entered the pools (state offload)
    prefix_cached: bool = False              # takes part in prefix caching (registers blocks, snapshots)
    snapshot_at: list[int] = field(default_factory=list)   # prompt positions to cut a chunk and snapshot at
    draft_ids: list[int] = field(default_factory=list)     # speculative drafts for its next step (not output)
    constraint: object | None = None          # its structured-outputs matcher (k3.engine.structured)
    warning: str | None = None                # said in its last RequestOutput (see RequestOutput.warning)
    images: object | None = None              # its images (k3.engine.images.PromptImages), if any
    all_ids: list[int] = field(init=False)    # prompt + output, kept as tokens are appended (never rebuilt)

    def __post_init__(self) -> None:
        self.all_ids = list(self.prompt_ids) + list(self.output_ids)

    def append_output(self, token: int) -> None:
        self.output_ids.append(token)
        self.all_ids.append(token)

    @property
    def text(self) -> str | None:
        return None if self.detok is None else self.detok.text

    @property
    def prompt_key_ids(self) -> list[int]:
        """The prompt as the prefix cache keys it: image pads carry their image's key (engine/images.py)."""
        return self.prompt_ids if self.images is None else self.images.key_ids

    @property
    def key_ids(self) -> list[int]:
        return self.all_ids if self.images is None else self.images.key_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_pending(self) -> int:
        return self.num_tokens - self.num_computed

    @property
    def max_total_tokens(self) -> int:
        return len(self.prompt_ids) + self.params.max_tokens


@dataclass(frozen=True)
class RequestOutput:
    """What one step (or the whole run, for `LLM.generate`) produced for a request."""
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]              # everything generated so far
    new_token_ids: list[int]          # generated in this step
    text: str | None                  # detokenized output (None without a tokenizer)
    finished: bool
    finish_reason: str | None         # stop | length | abort | error
    logprobs: list[TokenLogprob] | None = None
    error: str | None = None
    # With SamplingParams.prompt_logprobs: one entry per prompt token, None for the first (nothing
    # predicts it) and for tokens restored from a saved state rather than computed.
    prompt_logprobs: list[TokenLogprob | None] | None = None
    warning: str | None = None        # e.g. max_tokens ended a structured output before its grammar did
