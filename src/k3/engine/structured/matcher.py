"""Per-request constraints: an llguidance matcher over the engine's tokenizer, the mask it allows,
and the tokens it accepts. `Grammars` builds the llguidance tokenizer once per engine (about a
second at K3's 163,840-token vocabulary) and compiles each request's grammar, turning any error
(an invalid schema, a keyword llguidance cannot enforce, a bad regex) into a ValueError naming it."""

from __future__ import annotations

import functools
import re

import torch

from k3.engine.structured.grammar import lark_grammar
from k3.engine.structured.params import StructuredOutputs


class Constraint:
    def __init__(self, matcher, vocab_size: int):
        self.matcher, self.vocab_size = matcher, vocab_size
        self._bits = torch.arange(32, dtype=torch.int32)

    def allowed(self) -> torch.Tensor:
        """[vocab] bool: the tokens the grammar allows next."""
        words = torch.frombuffer(bytearray(self.matcher.compute_bitmask()), dtype=torch.int32)
        return ((words.unsqueeze(1) >> self._bits) & 1).bool().reshape(-1)[:self.vocab_size]

    def accept(self, token: int) -> bool:
        return self.matcher.consume_token(token)

    @property
    def done(self) -> bool:
        """The grammar has ended (its EOS was taken, or nothing more can follow)."""
        return self.matcher.is_stopped()

    @property
    def complete(self) -> bool:
        return self.matcher.is_accepting() or self.matcher.is_stopped()

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

        grammar = llguidance.LLMatcher.grammar_from_lark(lark_grammar(so))
        matcher = llguidance.LLMatcher(self.lltokenizer, grammar, log_level=0)   # an invalid grammar: is_error()
        if matcher.is_error():
            raise ValueError(f"structured_outputs: {_short(matcher.get_error())}")
        return Constraint(matcher, self.vocab_size)


def validate(so: StructuredOutputs, checker=None) -> None:
    """Raise ValueError if the constraint cannot be compiled (checked without a tokenizer: cheap, early).
    `checker(lark) -> problem or None` validates elsewhere (the server's child process); by default, here."""
    if checker is None:
        import llguidance

        def checker(lark):
            return llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(lark))
    problem = checker(lark_grammar(so))
    if problem:
        raise ValueError(f"structured_outputs: {_short(problem)}")


def _short(message: str) -> str:
    """The first line of llguidance's message, without the position in k3's wrapper grammar."""
    line = message.strip().splitlines()[0][:500] if message.strip() else "the grammar is invalid"
    return re.sub(r"^at \d+\(\d+\): ", "", line)
