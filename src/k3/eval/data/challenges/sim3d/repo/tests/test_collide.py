import numpy as np

from sim3d import Body, Plane, World
from sim3d.collide import sphere_pairs, sphere_planes


def test_pair_normal_points_from_a_to_b():
    x = np.array([[0.0, 0, 0], [0.8, 0, 0], [5.0, 0, 0]])
    contacts = sphere_pairs(x, np.array([0.5, 0.5, 0.5]))
    assert len(contacts) == 1
    c = contacts[0]
    assert (c.a, c.b) == (0, 1)
    assert np.allclose(c.normal, [1, 0, 0])
    assert np.isclose(c.depth, 0.2)


def test_plane_contact_depth():
    planes = [Plane([0, 1, 0], 0.0)]
    contacts = sphere_planes(np.array([[0.0, 0.3, 0.0], [0.0, 2.0, 0.0]]), np.array([0.5, 0.5]), planes)
    assert [(c.body, c.plane) for c in contacts] == [(0, 0)]
    assert np.isclose(contacts[0].depth, 0.2)


def test_equal_masses_swap_velocities_head_on():
    w = World(gravity=(0, 0, 0))
    w.add(Body([-1, 0, 0], [1, 0, 0]))
    w.add(Body([1, 0, 0], [-1, 0, 0]))
    w.run(100, 0.01)
    v = w.velocities()
    assert np.allclose(v[0], [-1, 0, 0]) and np.allclose(v[1], [1, 0, 0])


def test_ball_rests_on_floor():
    w = World(gravity=(0, -10, 0), restitution=0.0)
    w.add_plane(Plane([0, 1, 0], 0.0))
    w.add(Body([0, 0.5, 0], radius=0.5))
    w.run(100, 0.01)
    assert abs(w.positions()[0][1] - 0.5) < 1e-9
