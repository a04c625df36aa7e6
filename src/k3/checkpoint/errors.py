"""The one exception type for a checkpoint that cannot be read as K3."""

from __future__ import annotations


class CheckpointError(Exception):
    """A broken or mismatched checkpoint. `file` and `tensor` name the culprit when known."""

    def __init__(self, message: str, *, file: str | None = None, tensor: str | None = None):
        where = ", ".join(x for x in (f"file {file}" if file else "", f"tensor {tensor}" if tensor else "") if x)
        super().__init__(f"{message} ({where})" if where else message)
        self.file, self.tensor = file, tensor
