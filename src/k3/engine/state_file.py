"""Sequence-state files: a safetensors file of the state's tensors, with metadata naming the format,
its version, the model it belongs to (a fingerprint of config and weights) and the token ids.
Written to a temporary name and renamed; anything that does not match is refused with the reason.
A digest of the tensor bytes in the metadata catches a file damaged after it was written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from k3.engine.cache.snapshot import SequenceState

FORMAT = "k3-sequence-state"
VERSION = 1


class StateFileError(ValueError):
    pass


def model_fingerprint(model) -> str:
    """sha256 of the config and of sample bytes from weights every K3 model has (norms, embedding rows,
    head): two checkpoints of one architecture with different weights differ here."""
    h = hashlib.sha256(json.dumps(model.config.__dict__, default=str, sort_keys=True).encode())
    for name, p in sorted(model.named_parameters()):
        if name.endswith(("norm.weight", "layernorm.weight")) or name in ("model.embed_tokens.weight", "lm_head.weight"):
            flat = p.detach().reshape(-1)
            h.update(name.encode() + flat[:64].float().numpy().tobytes() + flat[-64:].float().numpy().tobytes())
    return h.hexdigest()


def save_state(path: str | Path, state: SequenceState, fingerprint: str, dtype: torch.dtype) -> Path:
    path = Path(path)
    tensors = {k: v.contiguous() for k, v in state.tensors().items()}
    meta = {"format": FORMAT, "version": str(VERSION), "model": fingerprint, "dtype": str(dtype),
            "token_ids": json.dumps(state.token_ids), "pending_ids": json.dumps(state.pending_ids),
            "kda_layers": json.dumps(sorted(state.kda)), "mla_layers": json.dumps(sorted(state.mla)),
            "tensors_blake2b": _digest(tensors)}
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    os.replace(tmp, path)
    return path


def load_state(path: str | Path, fingerprint: str, dtype: torch.dtype) -> SequenceState:
    path = Path(path)
    if not path.is_file():
        raise StateFileError(f"state file {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            _check_meta(path, meta, fingerprint, dtype)
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        if "tensors_blake2b" in meta and meta["tensors_blake2b"] != _digest(tensors):
            raise StateFileError(f"state file {path} is damaged (its tensors do not match the digest it was "
                                 "saved with); save it again")
        return SequenceState.from_tensors(tensors, json.loads(meta["token_ids"]), json.loads(meta["pending_ids"]),
                                          json.loads(meta["kda_layers"]), json.loads(meta["mla_layers"]))
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        if isinstance(e, StateFileError):
            raise
        raise StateFileError(f"state file {path} is truncated or corrupt ({e}); save it again") from None


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.blake2b(digest_size=20)
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(name.encode() + str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _check_meta(path: Path, meta: dict, fingerprint: str, dtype: torch.dtype) -> None:
    if meta.get("format") != FORMAT:
        raise StateFileError(f"{path} is not a k3 sequence-state file")
    if meta.get("version") != str(VERSION):
        raise StateFileError(f"{path} has state format version {meta.get('version')}; this k3 reads {VERSION}")
    if meta.get("model") != fingerprint:
        raise StateFileError(f"{path} was saved by a different model (config or weights differ); "
                             "resume it with the model that saved it")
    if meta.get("dtype") != str(dtype):
        raise StateFileError(f"{path} holds {meta.get('dtype')} state, this engine computes in {dtype}")


def check_resumable(state: SequenceState, prompt: list[int]) -> None:
    n = len(state.token_ids)
    if prompt[:n] != state.token_ids:
        raise ValueError("resume_state: the prompt must begin with the saved state's tokens "
                         f"({n} tokens); use the saved tokens plus what comes next")
    if len(prompt) <= n:
        raise ValueError("resume_state: the prompt must add at least one token after the saved state "
                         "(the saved file's pending token, or new input)")
