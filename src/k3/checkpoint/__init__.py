"""Checkpoint input/output below the model: layout, reading, MXFP4 scale checks, test-checkpoint writing."""

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.layout import TensorSpec, expected_tensors
from k3.checkpoint.reader import CheckpointReader

__all__ = ["CheckpointError", "CheckpointReader", "TensorSpec", "expected_tensors"]
