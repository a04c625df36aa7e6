"""What crosses from the code under test to the judge (sandbox/wire.py, judge.py): plain data and numpy arrays of
numbers rebuilt as the judge's own objects, live containers for module state, exceptions by their built-in
base, and handles whose `callable`, `isinstance` and `==` are decided in the judge."""

from __future__ import annotations

import numpy as np
import pytest

from k3.eval.sandbox import Limits, Sandbox, wire
from sandbox_support import need_namespaces

LIBRARY = '''import numpy as np
REGISTRY = set()
THING = object()

class Thing:
    pass

class SceneError(ValueError):
    pass

def positions():
    return np.arange(6, dtype=np.float32).reshape(2, 3)

def energy():
    return np.float64(0.5)

def objects():
    return np.array([Thing()], dtype=object)

def bad():
    raise SceneError("no bodies")

def stop():
    raise StopIteration

def make():
    return Thing()

def names():
    return ["a", "b"]
'''


def _check(check: str) -> dict:
    need_namespaces()
    with Sandbox(Limits(wall_s=60, cpu_s=30, memory_bytes=2 << 30), files={"sim.py": LIBRARY}) as sb:
        r = sb.judge(check)
    assert r.verdict is not None, r.summary()
    return r.verdict


@pytest.mark.parametrize("check", [
    "import numpy as np, sim\np = sim.positions()\nassert type(p) is np.ndarray and p.dtype == np.float32 and p.shape == (2, 3)\n"
    "np.testing.assert_allclose(p.sum(axis=0), [3, 5, 7])",
    "import numpy as np, sim\ne = sim.energy()\nassert type(e) is np.float64 and abs(e - 0.5) < 1e-12",
    "import sim\nsim.REGISTRY.add('x')\nassert 'x' in sim.REGISTRY and len(sim.REGISTRY) == 1 and sim.REGISTRY == {'x'}",
    "import sim\ntry:\n    sim.bad()\nexcept ValueError as e:\n    assert type(e).__name__ == 'SceneError' and str(e) == 'no bodies'\n"
    "    assert isinstance(e, sim.SceneError) and sim.SceneError is sim.SceneError and issubclass(sim.SceneError, ValueError)\n"
    "else:\n    raise AssertionError('no error')",
    "import sim\nassert callable(sim.make) and not callable(sim.THING) and isinstance(sim.make(), sim.Thing)",
    "import sim\nassert sim.names() == ['a', 'b'] and type(sim.names()) is list",
    "import sim\nimport numpy as np\nassert type(sim.objects()) is not np.ndarray",   # object arrays stay in the worker
    "from sim import *\nassert names() == ['a', 'b'] and callable(make)",
], ids=["array", "numpy-scalar", "live-set", "exception-base", "callable-isinstance", "list-copy", "object-array",
        "star-import"])
def test_what_crosses(check):
    v = _check(check)
    assert v["passes"], v["error"]


def test_a_remote_stop_iteration_is_not_control_flow():
    v = _check("import sim\ndef gen():\n    yield sim.stop()\nassert list(gen()) == []\n")
    assert not v["passes"] and v["error"].startswith("Exception: StopIteration"), v


@pytest.mark.parametrize("data", [
    {"a": ["|O", [1], "00" * 8]},            # an object array
    {"a": ["<f4", [3], "00" * 8]},           # the bytes do not fill the shape
    {"a": ["<f4", [-1], ""]},
    {"n": ["<f8", "00" * 4]},
    {"a": [{"descr": 1}, [1], "00"]},
], ids=["object", "short", "negative", "scalar-size", "dtype-not-a-string"])
def test_malformed_arrays_are_refused(data):
    with pytest.raises(wire.RemoteError):
        wire.decode(data, lambda *a: None)


def test_arrays_round_trip():
    a = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]          # not contiguous
    back = wire.decode(wire.encode(a))
    assert back.dtype == a.dtype and np.array_equal(back, a) and back.flags.writeable
