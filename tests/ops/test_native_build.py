"""The native build (k3/ops/native/build.py): one translation unit per .cpp, rebuilt incrementally in a
build directory kept per flag set and checkout, published under a key of everything the library depends
on; concurrent builders take turns under an OS lock, and nothing half-built is ever published."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from k3.ops.native import build


def test_the_key_covers_what_it_is_given_flags_torch_python_and_compiler(monkeypatch):
    import torch

    base = build.build_key("src", ["-O3"])
    assert build.build_key("src2", ["-O3"]) != base
    assert build.build_key("src", ["-O3", "-mavx2"]) != base
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert build.build_key("src", ["-O3"]) != base
    monkeypatch.undo()
    monkeypatch.setattr(build, "_compiler", lambda: "c++ (Other) 99.1")
    assert build.build_key("src", ["-O3"]) != base
    monkeypatch.undo()
    monkeypatch.setattr(build.sys.implementation, "cache_tag", "cpython-399")
    assert build.build_key("src", ["-O3"]) != base


def test_the_sources_digest_covers_units_and_headers(tmp_path):
    (tmp_path / "a.cpp").write_text('#include "k3.h"\n')
    (tmp_path / "k3.h").write_text("#pragma once\n")
    assert build.units(tmp_path) == [tmp_path / "a.cpp"]
    first = build.sources_digest(tmp_path)
    (tmp_path / "k3.h").write_text("#pragma once\n// edited\n")
    assert build.sources_digest(tmp_path) != first
    (tmp_path / "b.cpp").write_text("")
    assert len({first, build.sources_digest(tmp_path)}) == 2


def test_the_shipped_sources_are_units_with_the_shared_header():
    """Every unit includes k3.h (directly or through decode.h); only bindings.cpp sees pybind11."""
    for unit in build.units():
        text = unit.read_text()
        assert '#include "k3.h"' in text or '#include "decode.h"' in text, unit.name
        assert ("pybind" in text) == (unit.name == "bindings.cpp"), unit.name
        assert "#include <torch/extension.h>" not in text, unit.name


def _fake_load(log, fail=False, pause=0.3):
    def load(name, sources, build_directory, **kw):
        assert not Path(build_directory, "lock").exists(), "a stale torch lock was left in place"
        log.append(("start", time.monotonic()))
        time.sleep(pause)
        if fail:
            raise RuntimeError("compiler exploded")
        library = Path(build_directory, f"{name}.so")
        library.write_text(f"built from {len(sources)} units")
        log.append(("end", time.monotonic()))
        return type("Module", (), {"__file__": str(library)})

    return load


def test_concurrent_builders_take_turns_and_the_second_imports_the_first(tmp_path, monkeypatch, capsys):
    import torch.utils.cpp_extension as ext

    log = []
    monkeypatch.setattr(ext, "load", _fake_load(log))
    monkeypatch.setattr(build, "import_from", lambda directory, name: f"imported {directory.name}")
    final, build_dir = tmp_path / "k3_native_abc", tmp_path / "build-x"
    results = []

    def builder():
        results.append(build.build("k3_native", [Path("a.cpp")], [], build_dir, final))

    threads = [threading.Thread(target=builder) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [kind for kind, _ in log] == ["start", "end"], "the builder that waited built again"
    assert len(results) == 2 and results.count("imported k3_native_abc") == 1
    assert (final / "k3_native.so").read_text() == "built from 1 units"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build-x", "k3_native_abc"], "a temporary was left"
    assert "building k3's CPU kernels (1 units), once" in capsys.readouterr().err


def test_a_stale_torch_lock_does_not_block_the_next_build(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as ext

    monkeypatch.setattr(ext, "load", _fake_load([], pause=0))
    build_dir = tmp_path / "build-x"
    build_dir.mkdir()
    (build_dir / "lock").write_text("")    # what a build killed inside torch's load leaves
    build.build("k3_native", [], [], build_dir, tmp_path / "k3_native_abc")
    assert (tmp_path / "k3_native_abc" / "k3_native.so").is_file()


def test_a_failed_build_publishes_nothing_and_releases_the_lock(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as ext

    monkeypatch.setattr(ext, "load", _fake_load([], fail=True, pause=0))
    build_dir, final = tmp_path / "build-x", tmp_path / "k3_native_abc"
    with pytest.raises(RuntimeError, match="exploded"):
        build.build("k3_native", [], [], build_dir, final)
    assert not final.exists()
    monkeypatch.setattr(ext, "load", _fake_load([], pause=0))
    build.build("k3_native", [], [], build_dir, final)    # would wait forever on a lock still held
    assert (final / "k3_native.so").is_file()


TINY_UNITS = {
    "answer.cpp": '#include "tiny.h"\nint answer() { return 42; }\n',
    "module.cpp": '#include <Python.h>\n#include "tiny.h"\n#define K3_CAT(a, b) a##b\n#define K3_INIT(n) K3_CAT(PyInit_, n)\n'
                  'static PyModuleDef def = {PyModuleDef_HEAD_INIT, "tiny", nullptr, -1, nullptr};\n'
                  'PyMODINIT_FUNC K3_INIT(TORCH_EXTENSION_NAME)(void) {\n'
                  '  PyObject* m = PyModule_Create(&def);\n  PyModule_AddIntConstant(m, "answer", answer());\n'
                  '  return m;\n}\n',
    "tiny.h": "#pragma once\nint answer();\n",
}
BUILD_AND_ASK = ("import sys; from pathlib import Path; from k3.ops.native import build as b; d = Path(sys.argv[1]); "
                 "m = b.build('tiny', b.units(d / 'src'), ['-O1'], d / 'build', d / sys.argv[2], include=d / 'src'); "
                 "print(m.answer)")


def _build_in_a_process(root: Path, published: str) -> int:
    done = subprocess.run([sys.executable, "-c", BUILD_AND_ASK, str(root), published], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1])


def test_an_edit_recompiles_only_its_unit(tmp_path):
    """A real build of a two-unit module, twice: after editing one unit, the other's object is reused."""
    src = tmp_path / "src"
    src.mkdir()
    for name, text in TINY_UNITS.items():
        (src / name).write_text(text)
    assert _build_in_a_process(tmp_path, "first") == 42
    objects = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "build").glob("*.o")}
    assert set(objects) == {"answer.o", "module.o"}
    (src / "answer.cpp").write_text(TINY_UNITS["answer.cpp"].replace("42", "43"))
    assert _build_in_a_process(tmp_path, "second") == 43
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "build").glob("*.o")}
    assert after["module.o"] == objects["module.o"], "an untouched unit was recompiled"
    assert after["answer.o"] != objects["answer.o"]
    assert (tmp_path / "first" / "tiny.so").is_file() and (tmp_path / "second" / "tiny.so").is_file()


def test_the_cache_directory_can_be_chosen(monkeypatch, tmp_path):
    import k3.ops.native as nat

    monkeypatch.setenv("K3_NATIVE_CACHE", str(tmp_path))
    assert nat.cache_root() == tmp_path


def test_a_long_build_says_how_far_it_has_come(tmp_path, monkeypatch, capsys):
    """Issue 69: the first build was silent for minutes. While it runs, a line every HEARTBEAT_S counts the
    units compiled so far (object files written since it began)."""
    import time

    from k3.ops.native import build

    monkeypatch.setattr(build, "HEARTBEAT_S", 0.05)
    (tmp_path / "old.o").write_bytes(b"")
    os.utime(tmp_path / "old.o", (0, 0))                 # a previous build's: not counted
    with build._heartbeat(tmp_path, 3):
        (tmp_path / "a.o").write_bytes(b"")
        time.sleep(0.3)
    lines = capsys.readouterr().err.splitlines()
    assert lines and lines[-1].startswith("k3: still building the CPU kernels:") and "1 of 3 units" in lines[-1]
