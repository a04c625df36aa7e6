from sim3d import Body, Distance, World
from sim3d.rope import rope


def test_error_of_a_held_rope_is_small():
    w = World(gravity=(0, -9.81, 0))
    rope(w, [0, 4, 0], [3, 4, 0], 8, pin_start=True)
    assert w.constraint_error() < 1e-12
    w.run(400, 0.004)
    assert w.constraint_error() < 1e-3


def test_error_is_the_worst_relative_violation():
    w = World()
    for x in (0, 3, 3.5):
        w.add(Body([x, 0, 0]))
    w.add_constraint(Distance(0, 1, 2.0))
    w.add_constraint(Distance(1, 2, 1.0))
    assert abs(w.constraint_error() - 0.5) < 1e-12
    assert World().constraint_error() == 0.0
