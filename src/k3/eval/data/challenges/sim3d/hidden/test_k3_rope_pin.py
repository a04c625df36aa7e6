import numpy as np

from sim3d import World
from sim3d.rope import rope


def test_pinned_rope_hangs():
    w = World(gravity=(0, -9.81, 0))
    beads = rope(w, [0, 4, 0], [3, 4, 0], 6, pin_start=True)
    assert w.body(beads[0]).fixed and not any(w.body(i).fixed for i in beads[1:])
    w.run(200, 0.004)                                             # about its lowest swing
    x = w.positions()
    assert np.allclose(x[beads[0]], [0, 4, 0])
    assert x[beads[1:], 1].mean() < 3.0                           # it fell, and hangs from the pin
    assert np.linalg.norm(x[beads[-1]] - x[beads[0]]) < 3.0 + 1e-3


def test_unpinned_rope_falls_whole():
    w = World(gravity=(0, -9.81, 0))
    beads = rope(w, [0, 4, 0], [3, 4, 0], 4)
    assert not any(w.body(i).fixed for i in beads)
    w.run(100, 0.01)
    assert (w.positions()[:, 1] < 0).all()
