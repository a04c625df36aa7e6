import numpy as np
import pytest

from sim3d import Body, Distance, Plane, World


def test_free_fall():
    w = World(gravity=(0, -10, 0))
    w.add(Body([0, 100, 0], [1, 0, 0]))
    w.run(100, 0.01)
    assert np.allclose(w.positions()[0], [1.0, 95.0, 0.0])
    assert np.allclose(w.velocities()[0], [1.0, -10.0, 0.0])


def test_fixed_body_stays():
    w = World()
    w.add(Body([0, 1, 0], [1, 1, 1], fixed=True))
    w.run(10, 0.01)
    assert np.allclose(w.positions()[0], [0, 1, 0])


def test_elastic_bounce_returns_to_height():
    w = World(gravity=(0, -10, 0), restitution=1.0)
    w.add_plane(Plane([0, 1, 0], 0.0))
    w.add(Body([0, 2.5, 0], radius=0.5))
    top = []
    for _ in range(70):
        w.run(10, 0.002)
        top.append(w.positions()[0][1])
    assert min(top) > 0.49
    assert max(top[40:]) > 2.4


def test_inelastic_bounce_loses_energy():
    w = World(gravity=(0, -10, 0), restitution=0.5)
    w.add_plane(Plane([0, 1, 0], 0.0))
    w.add(Body([0, 2.5, 0], radius=0.5))
    e0 = w.energy()
    w.run(500, 0.002)
    assert w.energy() < 0.8 * e0


def test_pendulum_holds_its_length():
    w = World(gravity=(0, -10, 0))
    pivot = w.add(Body([0, 0, 0], fixed=True, radius=0.1))
    bob = w.add(Body([1, 0, 0], radius=0.1))
    w.add_constraint(Distance(pivot, bob, 1.0))
    w.run(200, 0.005)
    x = w.positions()
    assert np.allclose(x[pivot], 0.0)
    assert abs(np.linalg.norm(x[bob]) - 1.0) < 1e-6


def test_unknown_integrator_is_refused():
    with pytest.raises(ValueError, match="integrator"):
        World(integrator="rk9")
