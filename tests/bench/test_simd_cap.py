"""K3_NATIVE_SIMD=avx2 caps both engines of a comparison: k3's kernels, and llama.cpp's build (a second
build with an AVX2-only CPU's instruction sets), and benchmarks/record.py files the run under a kind of
its own, with the cap in its command."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

build = importlib.import_module("k3.testing.llama_cpp.build")   # the module (the package exports its build())

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import record  # noqa: E402


def _flag(flags: list[str], name: str) -> str | None:
    return next((f.split("=", 1)[1] for f in flags if f.startswith(f"-D{name}=")), None)


def test_uncapped_llama_cpp_is_built_for_this_cpu(monkeypatch, tmp_path):
    monkeypatch.delenv("K3_NATIVE_SIMD", raising=False)
    assert build.simd_cap() is None
    assert _flag(build.cmake_flags(), "GGML_NATIVE") == "ON"
    assert build.bin_dir(tmp_path) == tmp_path / "build" / "bin"


def test_an_avx2_cap_builds_llama_cpp_apart_with_no_wider_instructions(monkeypatch, tmp_path):
    monkeypatch.setenv("K3_NATIVE_SIMD", "avx2")
    flags = build.cmake_flags()
    assert _flag(flags, "GGML_NATIVE") == "OFF"    # else -march=native would bring this CPU's AVX-512 back
    for on in ("GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C"):
        assert _flag(flags, on) == "ON", on
    for off in ("GGML_AVX512", "GGML_AVX_VNNI", "GGML_AMX_INT8", "GGML_AMX_BF16"):
        assert _flag(flags, off) == "OFF", off
    assert build.bin_dir(tmp_path) == tmp_path / "build-avx2" / "bin"   # never the native build's files


def test_a_scalar_cap_keeps_the_native_build(monkeypatch, tmp_path):
    monkeypatch.setenv("K3_NATIVE_SIMD", "scalar")
    assert build.simd_cap() is None and build.bin_dir(tmp_path) == tmp_path / "build" / "bin"


def test_the_avx2_build_holds_no_avx512_code(monkeypatch):
    """Where the capped build exists (made by `K3_NATIVE_SIMD=avx2 python -m k3.testing.llama_cpp build`),
    its CPU backend uses no zmm register: no AVX-512 instruction at all."""
    monkeypatch.setenv("K3_NATIVE_SIMD", "avx2")
    if not build.is_built() or shutil.which("objdump") is None:
        pytest.skip("no AVX2-capped llama.cpp build here (it is made on demand, not by CI)")
    code = subprocess.run(["objdump", "-d", str(build.bin_dir() / "libggml-cpu.so")], capture_output=True, text=True,
                          check=True).stdout
    assert "vfmadd" in code and "ymm" in code      # a vector build, just not a 512-bit one
    assert "zmm" not in code


def test_a_capped_run_is_recorded_as_its_own_kind_with_the_cap_in_its_command(monkeypatch):
    monkeypatch.delenv("K3_NATIVE_SIMD", raising=False)
    plain = record.cpu()["kind"]
    assert record.capped_as() == []
    monkeypatch.setenv("K3_NATIVE_SIMD", "avx2")
    capped = record.cpu()["kind"]
    assert record.capped_as() == ["K3_NATIVE_SIMD=avx2"]
    if plain.endswith("AVX2"):           # a cap at the CPU's own level changes nothing
        assert capped == plain
    else:
        assert capped == plain + ", capped at AVX2"
