"""Per-request constraints: an llguidance matcher over the engine's tokenizer, the mask it allows,
and the tokens it accepts. `Grammars` builds the llguidance tokenizer once per engine (about a
second at K3's 163,840-token vocabulary) and compiles each request's grammar, turning any error
(an invalid schema, a keyword llguidance cannot enforce, a bad regex) into a ValueError naming it."""

from __future__ import annotations

import functools
import re

import torch

from k3.engine.structured.grammar import llguidance_grammar
from k3.engine.structured.params import StructuredOutputs


class Constraint:
    def __init__(self, matcher, vocab_size: int, frame_token: int | None = None):
        """frame_token: the id that opens K3's closing frame (`<|close|>`); None for unframed text."""
        self.matcher, self.vocab_size, self.frame_token = matcher, vocab_size, frame_token
        self._bits = torch.arange(32, dtype=torch.int32)

    def allowed(self) -> torch.Tensor:
        """[vocab] bool: the tokens the grammar allows next."""
        words = torch.frombuffer(bytearray(self.matcher.compute_bitmask()), dtype=torch.int32)
        return ((words.unsqueeze(1) >> self._bits) & 1).bool().reshape(-1)[:self.vocab_size]

    def accept(self, token: int) -> bool:
        return self.matcher.consume_token(token)

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of `tokens` (drafts) the grammar would take from here, in order; nothing is consumed."""
        return self.matcher.validate_tokens(list(tokens)) if tokens else 0

    def window(self, drafts: list[int]) -> torch.Tensor:
        """[len(drafts) + 1, vocab] bool: what the grammar allows at a verify window's rows, row j after
        drafts[:j] (each a valid prefix: `valid_prefix`). The drafts are taken and then rolled back, so the
        state is as before and the emitted tokens are taken one by one as always."""
        rows = [self.allowed()]
        for token in drafts:
            if not self.matcher.consume_token(token):
                raise ValueError(f"draft token {token} is not a valid continuation: {self.error()}")
            rows.append(self.allowed())
        if drafts and not self.matcher.rollback(len(drafts)):
            raise RuntimeError(f"the grammar could not roll back {len(drafts)} drafts: {self.error()}")
        return torch.stack(rows)

    @property
    def done(self) -> bool:
        """The grammar has ended (its EOS was taken, or nothing more can follow)."""
        return self.matcher.is_stopped()

    @property
    def complete(self) -> bool:
        return self.matcher.is_accepting() or self.matcher.is_stopped()

    def closing_frame(self) -> list[int] | None:
        """When max_tokens ends the output: [] if the grammar is complete; the tokens of K3's closing frame if
        they are all that can follow (the tokens the grammar forces start with `<|close|>` and end it), so
        the answer is whole and the frame is written for it (no sampling: the grammar forces each); None
        if the answer is cut."""
        if self.complete:
            return []
        if self.frame_token is None:
            return None
        probe = self.matcher.deep_copy()
        forced = probe.compute_ff_tokens()
        whole = (bool(forced) and forced[0] == self.frame_token and probe.consume_tokens(forced) is not False
                 and (probe.is_accepting() or probe.is_stopped()))
        if not whole or not self.matcher.consume_tokens(forced):
            return None
        return list(forced)

    def error(self) -> str:
        return self.matcher.get_error()


class Grammars:
    def __init__(self, tokenizer, vocab_size: int, eos_token_id: int | None):
        self.tokenizer, self.vocab_size, self.eos = tokenizer, vocab_size, eos_token_id

    @functools.cached_property
    def lltokenizer(self):
        from llguidance.tiktoken import lltokenizer_from_encoding

        return lltokenizer_from_encoding(self.tokenizer.encoding, n_vocab=self.vocab_size, eos_token=self.eos)

    def compile(self, so: StructuredOutputs) -> Constraint:
        import llguidance

        grammar = llguidance_grammar(so)
        matcher = llguidance.LLMatcher(self.lltokenizer, grammar, log_level=0)   # an invalid grammar: is_error()
        if matcher.is_error():
            raise ValueError(f"structured_outputs: {_short(matcher.get_error())}")
        for probe in [matcher, *(self._bare(schema) for schema in _schemas(so))]:
            _refuse_unsatisfiable(probe)
        frame = getattr(self.tokenizer, "close_id", None) if so.frame is not None else None
        return Constraint(matcher, self.vocab_size, frame)

    def _bare(self, schema):
        import llguidance

        return llguidance.LLMatcher(self.lltokenizer, llguidance_grammar(StructuredOutputs(json=schema)), log_level=0)


def _schemas(so: StructuredOutputs) -> list:
    """The JSON schemas inside a framed constraint (after free text, where the probe cannot reach them)."""
    if so.tools is not None:
        return [schema for _, schema in so.tools]
    return [so.json] if so.json is not None and so.frame is not None else []


def _refuse_unsatisfiable(matcher) -> None:
    """A grammar no text can complete (a required property that recurses without end) passes every check
    made without a tokenizer; the library finds out when it expands the tokens the grammar forces (the
    first `{` here). A copy takes the forced tokens now, so the request is refused, not failed at a step."""
    probe = matcher.deep_copy()
    forced = probe.compute_ff_tokens()
    stuck = probe.consume_tokens(forced) is False if forced else not (probe.is_accepting() or any(probe.compute_bitmask()))
    if stuck or probe.is_error():
        raise ValueError("structured_outputs: no output can satisfy this constraint: the text it forces never ends "
                         "(a schema whose required properties recurse without end has no finite instance; make the "
                         "recursion optional)")


def validate(so: StructuredOutputs, checker=None) -> None:
    """Raise ValueError if the constraint cannot be compiled (checked without a tokenizer: cheap, early).
    `checker(grammar) -> problem or None` validates elsewhere (the server's child process); by default, here."""
    if checker is None:
        import llguidance

        def checker(grammar):
            return llguidance.LLMatcher.validate_grammar(grammar)
    problem = checker(llguidance_grammar(so))
    if problem:
        raise ValueError(f"structured_outputs: {_short(problem)}")


def _short(message: str) -> str:
    """The first line of llguidance's message, without the position in k3's wrapper grammar."""
    line = message.strip().splitlines()[0][:500] if message.strip() else "the grammar is invalid"
    return re.sub(r"^at \d+\(\d+\): ", "", line)
