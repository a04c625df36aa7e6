"""k3.config.env: the one reader of K3_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3.config import env


def test_a_value_outside_the_choices_names_them(monkeypatch):
    monkeypatch.setenv("K3_NATIVE_SIMD", "avx3")
    with pytest.raises(ValueError, match=r"K3_NATIVE_SIMD='avx3': expected one of scalar, avx2, avx512"):
        env.read("K3_NATIVE_SIMD")
    monkeypatch.setenv("K3_HUGE_PAGES", "no")
    with pytest.raises(ValueError, match="expected one of 0, 1"):
        env.switch("K3_HUGE_PAGES", True)


def test_switches_take_their_default_when_unset_or_empty(monkeypatch):
    monkeypatch.delenv("K3_FETCH", raising=False)
    assert env.switch("K3_FETCH", True) is True
    monkeypatch.setenv("K3_FETCH", "")
    assert env.switch("K3_FETCH", True) is True
    monkeypatch.setenv("K3_FETCH", "0")
    assert env.switch("K3_FETCH", True) is False
    monkeypatch.setenv("K3_MXFP4_INT8", "1")
    assert env.switch("K3_MXFP4_INT8", False) is True


def test_a_name_without_a_line_cannot_be_read():
    with pytest.raises(KeyError):
        env.read("K3_" + "NOT_LISTED")   # split, or the docs generator would read it as a variable


def test_folders_default_under_the_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("K3_MODELS_DIR", raising=False)
    assert env.folder("K3_MODELS_DIR", "models") == tmp_path / "k3" / "models"
    monkeypatch.setenv("K3_MODELS_DIR", "/data/models")
    assert env.folder("K3_MODELS_DIR", "models") == Path("/data/models")

