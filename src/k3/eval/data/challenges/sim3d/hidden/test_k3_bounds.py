import numpy as np
import pytest

from sim3d import Body, World, random_scene


def test_bounds_hold_every_sphere():
    w = random_scene(15, seed=9)
    lo, hi = w.bounds()
    x, r = w.positions(), w.radius
    assert np.allclose(lo, (x - r[:, None]).min(axis=0)) and np.allclose(hi, (x + r[:, None]).max(axis=0))


def test_bounds_of_one_body():
    w = World()
    w.add(Body([1, -2, 3], radius=0.25))
    lo, hi = w.bounds()
    assert np.allclose(lo, [0.75, -2.25, 2.75]) and np.allclose(hi, [1.25, -1.75, 3.25])


def test_empty_world_has_no_bounds():
    with pytest.raises(ValueError):
        World().bounds()
