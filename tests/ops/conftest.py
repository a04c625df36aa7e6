"""Fixtures for the native-kernel tests: the built module, and one run per instruction set."""

from __future__ import annotations

import pytest

from k3.ops.native import native, simd_level


@pytest.fixture(scope="module")
def kernels():
    module = native()
    assert module is not None, "the native kernels failed to build (see the warning)"
    return module


LEVELS = [lvl for lvl in (0, 1, 2) if lvl <= simd_level()]  # every instruction set this CPU can run


@pytest.fixture(params=LEVELS, ids=lambda lvl: ["scalar", "avx2", "avx512"][lvl])
def level(kernels, request):
    """Runs the test once per instruction set, then restores the default."""
    assert kernels.set_simd(request.param) == request.param
    yield request.param
    kernels.set_simd(simd_level())


@pytest.fixture(params=["tiles", "sequential"])
def gemv_form(kernels, request):
    """Runs the test with the decode GEMVs reading every W in tiles of rows, then row after row
    (k3.ops.native.decode_gemv); restores the setting after."""
    from k3.ops.native import tuning

    before = kernels.set_gemv_sequential_bytes(tuning.FORMS[request.param])
    yield request.param
    kernels.set_gemv_sequential_bytes(before)


@pytest.fixture
def prefill_gemm_as(monkeypatch):
    """Sets K3_PREFILL_GEMM (None: unset) for the rest of the test, re-reading it; restores it after."""
    from k3.ops.native import prefill_gemm

    def choose(choice):
        if choice is None:
            monkeypatch.delenv("K3_PREFILL_GEMM", raising=False)
        else:
            monkeypatch.setenv("K3_PREFILL_GEMM", choice)
        prefill_gemm.cache_clear()

    yield choose
    monkeypatch.delenv("K3_PREFILL_GEMM", raising=False)
    prefill_gemm.cache_clear()
