"""Helpers for tests and demos: random checkpoints in the official layout, tolerance checks."""

from k3.testing.checkpoint import make_checkpoint
from k3.testing.tolerance import assert_close, rel_l2

__all__ = ["assert_close", "make_checkpoint", "rel_l2"]
