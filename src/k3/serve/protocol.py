"""OpenAI request schemas (pydantic) and the error shape. Unknown fields are ignored, as OpenAI's
servers do, except where they would silently change the meaning (checked in the routes). Types are
strict: "yes" is not a boolean and "5" is not a number (a lax coercion hides a client's bug)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_TOKENS_CAP = 32_768


class Strict(BaseModel):
    model_config = ConfigDict(strict=True)


class StreamOptions(Strict):
    include_usage: bool = False


class SamplingFields(Strict):
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_CAP)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1
    min_p: float = Field(0.0, ge=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    repetition_penalty: float = Field(1.0, gt=0)
    n: int = Field(1, ge=1, le=8)
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    structured_outputs: dict[str, Any] | None = None   # vLLM: one of json, json_object, regex, choice, grammar
    guided_json: dict[str, Any] | str | None = None    # vLLM's older names for the same
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_whitespace_pattern: str | None = None      # vLLM's older name for structured_outputs.whitespace_pattern
    guided_decoding_backend: str | None = None         # refused: k3 has one grammar engine
    logit_bias: dict[str, float] | None = None         # token id (as a string, as OpenAI sends it) -> bias
    # Fields OpenAI or vLLM define that k3 does not do: refused with a 400 naming them, never ignored.
    best_of: int | None = None
    suffix: str | None = None
    speculative_config: dict[str, Any] | None = None


class ChatRequest(SamplingFields):
    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_CAP)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None            # False: one call at most; true or unset: any number
    response_format: dict[str, Any] | None = None
    reasoning_effort: Literal["low", "medium", "high", "max"] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    chat_template: str | None = None                   # vLLM's; these three are refused unless at their defaults
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class CompletionRequest(SamplingFields):
    model: str
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)


class TokenizeRequest(Strict):
    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool = True


class DetokenizeRequest(Strict):
    model: str | None = None
    tokens: list[int]


class RequestError(ValueError):
    """A 400 that names the request field at fault."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class ClientGone(Exception):
    """The client closed the connection before a non-streamed answer was ready; its requests were aborted."""


ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               408: "timeout", 413: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable",
               504: "timeout"}


def error_body(message: str, kind: str, code: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None, headers: dict | None = None):
    from fastapi.responses import JSONResponse

    kind = ERROR_TYPES.get(status, "server_error")
    return JSONResponse(error_body(message, kind, status, param), status_code=status, headers=headers)
