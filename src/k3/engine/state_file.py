"""Sequence-state files: a safetensors file of the state's tensors, with metadata naming the format,
its version, the model it belongs to (a fingerprint of config and weights) and the token ids.
Written to a temporary name and renamed; anything that does not match is refused with the reason.

Every file carries a signature: HMAC-SHA256, under this user's state key, of all its metadata and
all its tensor bytes. A plain digest caught damage but not tampering (scale the state and recompute
it, or relabel `token_ids` to another prompt, and the wrong tokens came out silently); the signature
is required, covers the labels with the numbers, and only the key's holder can make one. The key is
K3_STATE_KEY when set (to move state files between machines, set the same value on both), else a
random key made on first use in ~/.cache/k3/state.key (mode 0600). The key is checked before use
(config/private.py): at least 32 bytes, and a key file must be a regular file of this user's, readable
by nobody else, in a folder nobody else may write. Every metadata field is type-checked before use."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from k3.config import env, private
from k3.engine.memory.sequence_state import SequenceState

FORMAT = "k3-sequence-state"
VERSION = 2          # 2: signed (HMAC over metadata and tensors); 1 had an optional, unkeyed digest
SIGNATURE = "signature_hmac_sha256"


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
            "kda_layers": json.dumps(sorted(state.kda)), "mla_layers": json.dumps(sorted(state.mla))}
    meta[SIGNATURE] = _signature(meta, tensors)
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
        given = meta.get(SIGNATURE)
        if not isinstance(given, str) or not hmac.compare_digest(given, _signature(meta, tensors)):
            raise StateFileError(f"state file {path} is damaged or was changed after it was saved, or it was signed "
                                 "with another state key (set K3_STATE_KEY to the saving machine's); save it again")
        fields = {name: _int_list(path, meta, name) for name in ("token_ids", "pending_ids", "kda_layers", "mla_layers")}
        return SequenceState.from_tensors(tensors, fields["token_ids"], fields["pending_ids"], fields["kda_layers"],
                                          fields["mla_layers"])
    except (SafetensorError, OSError, KeyError, ValueError, TypeError, IndexError) as e:
        if isinstance(e, (StateFileError, private.NotPrivate)):
            raise
        raise StateFileError(f"state file {path} is truncated or corrupt ({e}); save it again") from None


def _int_list(path: Path, meta: dict, name: str) -> list[int]:
    try:
        value = json.loads(meta[name])
    except (KeyError, TypeError, ValueError):
        raise StateFileError(f"state file {path}: metadata {name!r} is missing or not JSON; save it again") from None
    if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
        raise StateFileError(f"state file {path}: metadata {name!r} must be a list of non-negative integers")
    return value


def state_key() -> bytes:
    """This user's key for signing state files (see the module docstring); checked by config/private.py."""
    given = env.read("K3_STATE_KEY")
    if given:
        return private.check_key(given.encode(), "K3_STATE_KEY")
    return _key_file(env.cache_home() / "k3" / "state.key")


@functools.cache
def _key_file(path: Path) -> bytes:
    """The key in `path` (a private regular file of this user's in a folder only they write), made on first use."""
    try:
        key = private.read_file(path, "state key")
    except FileNotFoundError:
        _make_key(path)
        key = private.read_file(path, "state key")
    return private.check_key(key, f"the state key {path}")


def _make_key(path: Path) -> None:
    """A random key written whole to a temporary file (0600), then linked into place, so a process reading it
    never sees it half-written and two processes making it at once agree."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    private.check_dir(path.parent, "the folder of the state key")
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32).hex().encode())
    try:
        os.link(tmp, path)          # fails if another process linked its key first: theirs stands
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


def _signature(meta: dict, tensors: dict[str, torch.Tensor]) -> str:
    """HMAC-SHA256 of every metadata field but the signature and every tensor's name, dtype, shape and bytes."""
    h = hmac.new(state_key(), digestmod=hashlib.sha256)
    h.update(json.dumps({k: v for k, v in meta.items() if k != SIGNATURE}, sort_keys=True).encode())
    h.update(_digest(tensors).encode())
    return h.hexdigest()


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
