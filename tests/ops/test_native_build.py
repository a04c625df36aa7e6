"""The native build: keyed by everything it depends on, built in private directories and published by
one rename, so concurrent builders neither block nor corrupt each other."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import k3.ops.native as nat


def test_the_key_covers_sources_flags_torch_python_and_compiler(monkeypatch):
    import torch

    base = nat.build_key("src", ["-O3"])
    assert nat.build_key("src2", ["-O3"]) != base
    assert nat.build_key("src", ["-O3", "-mavx2"]) != base
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert nat.build_key("src", ["-O3"]) != base
    monkeypatch.undo()
    monkeypatch.setattr(nat, "_compiler", lambda: "c++ (Other) 99.1")
    assert nat.build_key("src", ["-O3"]) != base
    monkeypatch.undo()
    monkeypatch.setattr(nat.sys.implementation, "cache_tag", "cpython-399")
    assert nat.build_key("src", ["-O3"]) != base


def test_concurrent_builds_neither_block_nor_corrupt(tmp_path, monkeypatch, capsys):
    inside = threading.Barrier(2, timeout=20)   # both builders must be inside load_inline at once

    def fake_load_inline(name, build_directory, **kw):
        inside.wait()                            # a lock held across the build would time out here
        Path(build_directory, f"{name}.so").write_text(f"built in {build_directory}")
        return f"module from {build_directory}"

    import torch.utils.cpp_extension as ext

    monkeypatch.setattr(ext, "load_inline", fake_load_inline)
    final = tmp_path / "k3_native_abc"
    results = []
    threads = [threading.Thread(target=lambda: results.append(nat._build("k3_native_abc", "src", [], final)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and all(r.startswith("module from") for r in results)
    assert (final / "k3_native_abc.so").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["k3_native_abc"], "a temporary build directory was left behind"
    assert "building k3's CPU kernels, once" in capsys.readouterr().err


def test_a_failed_build_leaves_nothing(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as ext

    def broken(**kw):
        raise RuntimeError("compiler exploded")

    monkeypatch.setattr(ext, "load_inline", broken)
    with pytest.raises(RuntimeError, match="exploded"):
        nat._build("k3_native_x", "src", [], tmp_path / "k3_native_x")
    assert list(tmp_path.iterdir()) == []


def test_the_cache_directory_can_be_chosen(monkeypatch, tmp_path):
    monkeypatch.setenv("K3_NATIVE_CACHE", str(tmp_path))
    assert nat.cache_root() == tmp_path
