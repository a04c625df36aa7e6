"""A request's constraint: OpenAI's `response_format` (chat), vLLM's `structured_outputs` (chat and
completions) and its older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar` fields.
Any problem is a 400 naming the field; nothing falls back to prompt-only."""

from __future__ import annotations

from k3.chat.validate import check_depth
from k3.engine.structured import StructuredOutputs
from k3.engine.structured.matcher import validate
from k3.engine.structured.params import constrains_calls
from k3.serve import grammar_check
from k3.serve.protocol import RequestError

GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar",
          "guided_whitespace_pattern": "whitespace_pattern"}


def request_constraint(req, frame: str | None) -> StructuredOutputs | None:
    """frame: "think"/"response" for a chat answer (its response channel), None for a completion."""
    for field in ("response_format", "structured_outputs", "guided_json"):
        if getattr(req, field, None) is not None:
            check_depth(getattr(req, field), field)     # the chat layer's limit, before any grammar is built
    if getattr(req, "guided_decoding_backend", None) is not None:
        raise RequestError("guided_decoding_backend: k3 has one grammar engine (llguidance); leave the field out",
                           "guided_decoding_backend")
    asked = {}
    if getattr(req, "structured_outputs", None) is not None:
        asked["structured_outputs"] = lambda: StructuredOutputs.from_request(req.structured_outputs, frame)
    guided = {k: getattr(req, k) for k in GUIDED if getattr(req, k, None) is not None}
    if set(guided) == {"guided_whitespace_pattern"}:
        raise RequestError("guided_whitespace_pattern: give it beside guided_json", "guided_whitespace_pattern")
    if guided:
        asked[", ".join(guided)] = lambda: StructuredOutputs.from_request(
            {GUIDED[k]: v for k, v in guided.items()}, frame)
    rf = getattr(req, "response_format", None)
    if rf is not None and (not isinstance(rf, dict) or rf.get("type") != "text"):
        asked["response_format"] = lambda: StructuredOutputs.from_response_format(rf, frame or "response")
    tools, choice = getattr(req, "tools", None), getattr(req, "tool_choice", None)
    if constrains_calls(tools, choice, shaped=bool(asked)):
        parallel = getattr(req, "parallel_tool_calls", None)
        asked["tools"] = lambda: StructuredOutputs.from_tools(tools, choice, frame or "response", parallel)
    if len(asked) > 1:
        raise RequestError(f"give one constraint, not {' and '.join(asked)}", next(iter(asked)))
    for field, make in asked.items():
        try:
            so = make()
            if so is not None:
                validate(so, grammar_check.shared().problem)   # in a child process: a crash is a 400
            return so
        except ValueError as e:
            raise RequestError(str(e), field) from None
    return None
