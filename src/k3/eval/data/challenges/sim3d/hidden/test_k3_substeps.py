import numpy as np
import pytest

from sim3d import random_scene


def test_substeps_move_like_small_steps():
    a, b = random_scene(10, seed=3, gravity=(0, -9.81, 0)), random_scene(10, seed=3, gravity=(0, -9.81, 0))
    a.run(20, 0.02, substeps=5)
    b.run(100, 0.004)
    assert np.allclose(a.positions(), b.positions(), atol=1e-9)
    assert abs(a.time - 0.4) < 1e-9


def test_default_is_one_substep():
    a, b = random_scene(6, seed=1), random_scene(6, seed=1)
    a.run(30, 0.01)
    b.run(30, 0.01, substeps=1)
    assert np.array_equal(a.positions(), b.positions())


def test_substeps_below_one_are_refused():
    with pytest.raises(ValueError):
        random_scene(2, seed=0).run(1, 0.01, substeps=0)
