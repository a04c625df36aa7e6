"""Structured outputs: grammar-constrained decoding with llguidance (JSON schemas, regexes, choices,
Lark grammars), framed by K3's XTML for chat answers."""

from k3.engine.structured.params import StructuredOutputs

__all__ = ["StructuredOutputs"]
