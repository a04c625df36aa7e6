import numpy as np

from sim3d import quat, vec


def test_normalize_and_length():
    v = vec.normalize(np.array([3.0, 4.0, 0.0]))
    assert np.allclose(v, [0.6, 0.8, 0.0])
    assert np.isclose(vec.length(v), 1.0)
    assert np.allclose(vec.normalize(np.zeros(3)), 0.0)


def test_reflect():
    assert np.allclose(vec.reflect(np.array([1.0, -2.0, 0.0]), np.array([0.0, 1.0, 0.0])), [1.0, 2.0, 0.0])


def test_quarter_turn_about_z():
    q = quat.from_axis_angle([0, 0, 1], np.pi / 2)
    assert np.allclose(quat.rotate(q, [1, 0, 0]), [0, 1, 0])
    assert np.allclose(quat.rotate(q, [0, 1, 0]), [-1, 0, 0])


def test_product_composes_rotations():
    q1 = quat.from_axis_angle([1, 0, 0], 0.7)
    q2 = quat.from_axis_angle([0, 1, 1], -1.3)
    v = np.array([0.3, -1.2, 2.0])
    assert np.allclose(quat.rotate(quat.multiply(q2, q1), v), quat.rotate(q2, quat.rotate(q1, v)))


def test_matrix_agrees_with_rotate():
    q = quat.from_axis_angle([1, 2, 3], 0.9)
    v = np.array([1.0, -0.5, 0.25])
    assert np.allclose(quat.to_matrix(q) @ v, quat.rotate(q, v))


def test_conjugate_undoes():
    q = quat.from_axis_angle([0, 1, 0], 2.0)
    assert np.allclose(quat.multiply(q, quat.conjugate(q)), quat.identity())
