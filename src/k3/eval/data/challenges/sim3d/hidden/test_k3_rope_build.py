import numpy as np
import pytest

from sim3d import Body, World
from sim3d.rope import rope


def test_beads_evenly_spaced_and_joined():
    w = World()
    w.add(Body([9, 9, 9]))
    beads = rope(w, [0, 1, 0], [0, 1, 6], 7, mass=0.5)
    assert beads == list(range(1, 8))
    x = w.positions()
    assert np.allclose(x[1:], [[0, 1, z] for z in range(7)])
    assert np.allclose(w.radius[1:], 0.25)
    assert all(w.body(i).mass == 0.5 for i in beads)
    pairs = sorted((c.a, c.b) for c in w.constraints)
    assert pairs == [(i, i + 1) for i in range(1, 7)]
    assert all(abs(c.length - 1.0) < 1e-12 for c in w.constraints)


def test_two_beads_at_least():
    with pytest.raises(ValueError):
        rope(World(), [0, 0, 0], [1, 0, 0], 1)
