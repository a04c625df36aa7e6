"""The key that signs saved state is checked like any file k3 trusts (issue 69): long enough to sign with,
a regular file (no symlink, FIFO or folder), this user's, readable by nobody else, in a folder nobody else
writes. A state re-signed with a guessable key is refused, never resumed."""

from __future__ import annotations

import hashlib
import hmac
import json
import os

import pytest
from safetensors import safe_open
from safetensors.torch import save_file

from k3.cli.main import main
from k3.config import private
from k3.engine import LLM, SamplingParams
from k3.engine import state_file
from k3.engine.state_file import SIGNATURE, StateFileError, state_key

PROMPT = [5, 17, 3, 88, 41, 2, 9]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A cache root of the test's own: the key lives in HOME/k3/state.key."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    monkeypatch.delenv("K3_STATE_KEY", raising=False)
    state_file._key_file.cache_clear()
    yield root / "k3"
    state_file._key_file.cache_clear()


def test_a_key_is_made_once_private_and_long(home):
    key = state_key()
    path = home / "state.key"
    assert key == path.read_bytes() and len(key) >= private.MIN_KEY_BYTES
    assert path.stat().st_mode & 0o777 == 0o600 and home.stat().st_mode & 0o077 == 0


def _bad_keys(home, tmp_path):
    public = tmp_path / "public.txt"
    public.write_text("x" * 64)
    public.chmod(0o644)
    return {
        "empty": (lambda p: (p.write_bytes(b""), p.chmod(0o600)), "0 bytes"),
        "short": (lambda p: (p.write_bytes(b"a"), p.chmod(0o600)), "1 bytes"),
        "symlink": (lambda p: p.symlink_to(public), "symbolic link"),
        "readable": (lambda p: (p.write_bytes(b"k" * 64), p.chmod(0o644)), "mode 644"),
        "folder": (lambda p: p.mkdir(), "not a regular file"),
        "fifo": (lambda p: os.mkfifo(p, 0o600), "not a regular file"),
    }


@pytest.mark.parametrize("case", ["empty", "short", "symlink", "readable", "folder", "fifo"])
def test_a_key_file_that_is_not_private_and_long_is_refused(home, tmp_path, case):
    home.mkdir(mode=0o700)
    make, says = _bad_keys(home, tmp_path)[case]
    make(home / "state.key")
    with pytest.raises(private.NotPrivate, match=says):
        state_key()


def test_a_key_of_another_user_or_in_a_folder_others_write_is_refused(home, monkeypatch):
    home.mkdir(mode=0o700)
    (home / "state.key").write_bytes(b"k" * 64)
    (home / "state.key").chmod(0o600)
    home.chmod(0o777)
    with pytest.raises(private.NotPrivate, match="other users may write there"):
        state_key()
    home.chmod(0o700)
    assert state_key() == b"k" * 64
    state_file._key_file.cache_clear()
    monkeypatch.setattr(private.os, "geteuid", lambda: os.getuid() + 1)
    with pytest.raises(private.NotPrivate, match="owned by another user"):
        state_key()


@pytest.mark.parametrize("value", ["a", "x" * 31])
def test_a_short_environment_key_is_refused(home, monkeypatch, value):
    monkeypatch.setenv("K3_STATE_KEY", value)
    with pytest.raises(private.NotPrivate, match=f"K3_STATE_KEY is {len(value)} bytes"):
        state_key()
    monkeypatch.setenv("K3_STATE_KEY", "x" * 32)
    assert state_key() == b"x" * 32


def test_a_state_re_signed_with_the_empty_key_is_not_resumed(home, tiny_checkpoint, tmp_path):
    llm = LLM(str(tiny_checkpoint), max_num_seqs=1, cache_memory="8MiB")
    path = tmp_path / "s.state"
    llm.generate([PROMPT], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True), save_state=path)
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) * 1000 for k in f.keys()}
    # the attack: the key file emptied, the scaled state signed with HMAC(b"")
    (home / "state.key").write_bytes(b"")
    (home / "state.key").chmod(0o600)
    state_file._key_file.cache_clear()
    h = hmac.new(b"", digestmod=hashlib.sha256)
    h.update(json.dumps({k: v for k, v in meta.items() if k != SIGNATURE}, sort_keys=True).encode())
    h.update(state_file._digest(tensors).encode())
    save_file(tensors, str(path), metadata=dict(meta, **{SIGNATURE: h.hexdigest()}))
    with pytest.raises(private.NotPrivate, match="0 bytes"):
        llm.generate(None, SamplingParams(max_tokens=2), resume_from=path)
    assert isinstance(private.NotPrivate("x"), ValueError) and not issubclass(StateFileError, private.NotPrivate)


def test_generate_with_an_unusable_key_says_so_without_a_traceback(home, tiny_checkpoint, tmp_path, capsys):
    home.mkdir(mode=0o700)
    os.mkfifo(home / "state.key", 0o600)      # a FIFO: it must neither hang nor raise a traceback
    rc = main(["generate", "--model", str(tiny_checkpoint), "--prompt-ids", "5,17,3", "--max-tokens", "2",
               "--save-state", str(tmp_path / "s.state")])
    err = capsys.readouterr().err
    assert rc != 0 and "state key" in err and "not a regular file" in err and "Traceback" not in err
    assert not (tmp_path / "s.state").exists()
