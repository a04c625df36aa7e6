"""Checkpoint input/output below the model: layout, reading, MXFP4 scale checks, test-checkpoint writing."""

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.layout import ExpectedTensor, expected_tensors
from k3.checkpoint.reader import CheckpointReader

__all__ = ["CheckpointError", "CheckpointReader", "ExpectedTensor", "expected_tensors"]
