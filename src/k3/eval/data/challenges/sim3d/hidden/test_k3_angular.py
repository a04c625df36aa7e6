import numpy as np

from sim3d import Body, World


def test_orbital_and_spin_parts():
    w = World(gravity=(0, 0, 0))
    w.add(Body([1, 2, 0], [0, 0, 3], mass=2.0, radius=0.5, spin=[0, 0, 4]))
    w.add(Body([5, 5, 5], [1, 1, 1], fixed=True))
    orbital = np.cross([1 - 1, 2 - 0, 0 - 0], 2.0 * np.array([0, 0, 3]))
    spin = 0.4 * 2.0 * 0.25 * np.array([0, 0, 4])
    assert np.allclose(w.angular_momentum(about=(1, 0, 0)), orbital + spin)


def test_kept_through_collisions():
    # central impulses keep it exactly; pushing overlaps apart moves the bodies a little, hence the tolerance
    w = World(gravity=(0, 0, 0), restitution=0.8)
    w.add(Body([-2, 0.3, 0], [2, 0, 0], mass=1.0))
    w.add(Body([2, -0.2, 0.1], [-1, 0, 0], mass=2.5))
    w.add(Body([0.2, 3, -0.1], [0, -2, 0], mass=0.7, radius=0.4))
    before = w.angular_momentum(about=(0.5, -1, 2))
    w.run(2000, 0.001)
    assert np.allclose(w.angular_momentum(about=(0.5, -1, 2)), before, rtol=0, atol=5e-3 * np.abs(before).max())
