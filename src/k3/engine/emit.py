"""Appending a step's sampled tokens to a request's output, and deciding whether it is done.

A sample may hold several tokens (a verify window's accepted drafts and the one after them); they are
taken in order and the first stop (stop token, EOS, max_tokens, stop string) ends the request there,
so the tokens after it are never output, exactly as if they had been decoded one at a time.
"""

from __future__ import annotations

import time

from k3.engine.request import Request
from k3.engine.structured.check import output_problem


def emit(req: Request, sample, eos_token_id: int | None) -> tuple[list[int], str | None, str | None]:
    """-> (tokens appended, finish reason or None, error or None); ([], "error", None) when the sample failed
    (its own error says why)."""
    if not sample.tokens:
        return [], "error", None
    new = []
    for i, token in enumerate(sample.tokens):
        if sample.logprobs is not None:
            req.logprobs.append(sample.logprobs[i])
        req.append_output(token)
        new.append(token)
        req.first_token_time = req.first_token_time or time.perf_counter()
        if req.constraint is not None and not req.constraint.accept(token):
            return new, "error", f"structured outputs: the grammar refused token {token}: {req.constraint.error()}"
        reason = stop_reason(req, token, eos_token_id)
        if not reason and req.constraint is not None and req.constraint.done and token == eos_token_id:
            reason = "stop"   # the grammar took its end (EOS) though ignore_eos asked to go on: nothing can follow
        if reason:
            return new, reason, None
    return new, None, None


def stop_reason(req: Request, token: int, eos_token_id: int | None) -> str | None:
    """After `token` was appended: "stop", "length" or None (go on); feeds the detokenizer."""
    p = req.params
    stop_token = token in p.stop_token_ids or (token == eos_token_id and not p.ignore_eos)
    done = stop_token or len(req.output_ids) >= p.max_tokens
    if req.detok is not None:
        # A stop token is not part of the text; a stop string ends the request.
        if stop_token:
            req.detok.finish()
        elif req.detok.add(token, final=done):
            return "stop"
    return "stop" if stop_token else "length" if done else None


def close_at_length(req: Request, new: list[int], eos_token_id: int | None) -> tuple[str, list[int]]:
    """max_tokens ended a constrained output -> (finish reason, the tokens appended this step). "stop" when
    the answer is whole: the grammar is complete, or only K3's closing frame was left; what the grammar
    forces from there is appended without sampling (the frame, and for a framed chat message its end token,
    <|end_of_msg|>), so every reader sees a whole message. Else "length" with a warning."""
    frame = req.constraint.closing_frame()
    if frame is None:
        req.warning = "max_tokens ended the output before its structured-outputs grammar was complete; raise max_tokens"
        return "length", new
    if req.constraint.frame_token is not None and eos_token_id is not None and (req.output_ids + frame)[-1:] != [eos_token_id]:
        frame = frame + [eos_token_id]
    for token in frame:
        req.append_output(token)
    return "stop", new + frame


def final_reason(req: Request, reason: str, new: list[int], eos_token_id: int | None) -> tuple[str, list[int]]:
    """A finishing request's reason once its grammar is heard -> (reason, the tokens appended this step):
    max_tokens on a whole answer is "stop" (`close_at_length`), a stop whose JSON fails its schema "invalid"."""
    if reason == "length" and req.constraint is not None:
        reason, new = close_at_length(req, new, eos_token_id)
    if reason == "stop" and req.params.structured_outputs is not None:
        reason = _checked(req)
    return reason, new


def _checked(req: Request) -> str:
    """"stop", or "invalid" (with a warning) when an unframed JSON output fails its whole schema (check.py;
    a chat answer's JSON and tool calls are checked where its message is parsed)."""
    so = req.params.structured_outputs
    problem = None if so.frame is not None else output_problem(so, req.text or "")
    if problem is not None:
        req.warning = f"the output does not validate against the schema {problem}"
    return "invalid" if problem is not None and so.enforced else "stop"
