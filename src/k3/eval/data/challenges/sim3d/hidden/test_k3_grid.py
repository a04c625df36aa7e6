import numpy as np
import pytest

from sim3d import random_scene
from sim3d.collide import grid_pairs, sphere_pairs


@pytest.mark.parametrize("seed,scale", [(1, 0.25), (2, 0.4), (3, 1.0)])
def test_grid_finds_what_all_pairs_find(seed, scale):
    w = random_scene(60, seed=seed)
    x = w.positions() * scale
    want = sphere_pairs(x, w.radius)
    got = grid_pairs(x, w.radius)
    assert len(want) > 0 or scale == 1.0
    assert [(c.a, c.b) for c in got] == [(c.a, c.b) for c in want]
    assert np.allclose([c.depth for c in got], [c.depth for c in want])
    assert np.allclose([c.normal for c in got], [c.normal for c in want])


def test_grid_with_a_given_cell_and_tiny_worlds():
    w = random_scene(30, seed=4)
    x = w.positions() * 0.3
    assert [(c.a, c.b) for c in grid_pairs(x, w.radius, cell=5.0)] == [(c.a, c.b) for c in sphere_pairs(x, w.radius)]
    assert grid_pairs(np.zeros((0, 3)), np.zeros(0)) == []
    assert grid_pairs(np.zeros((1, 3)), np.ones(1)) == []
