"""Unit quaternions as arrays [w, x, y, z] for orientations."""

import numpy as np

from sim3d.vec import normalize as _normalize_vec


def identity() -> np.ndarray:
    return np.array([1.0, 0.0, 0.0, 0.0])


def from_axis_angle(axis, angle: float) -> np.ndarray:
    """The rotation by `angle` radians about `axis` (any length but zero)."""
    a = _normalize_vec(np.asarray(axis, dtype=np.float64))
    half = 0.5 * angle
    return np.concatenate([[np.cos(half)], np.sin(half) * a])


def multiply(q: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The Hamilton product q*r: rotating by r, then by q."""
    w1, x1, y1, z1 = q
    w2, x2, y2, z2 = r
    return np.array([
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ])


def conjugate(q: np.ndarray) -> np.ndarray:
    return np.array([q[0], -q[1], -q[2], -q[3]])


def normalize(q: np.ndarray) -> np.ndarray:
    return q / np.linalg.norm(q)


def rotate(q: np.ndarray, v) -> np.ndarray:
    """The vector `v` rotated by the unit quaternion `q`."""
    p = np.concatenate([[0.0], np.asarray(v, dtype=np.float64)])
    return multiply(multiply(q, p), conjugate(q))[1:]


def to_matrix(q: np.ndarray) -> np.ndarray:
    """The 3x3 rotation matrix of the unit quaternion `q`."""
    w, x, y, z = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def integrate(q: np.ndarray, omega, dt: float) -> np.ndarray:
    """The orientation after spinning at angular velocity `omega` (rad/s, world frame) for `dt` seconds."""
    omega = np.asarray(omega, dtype=np.float64)
    rate = float(np.linalg.norm(omega))
    if rate == 0.0:
        return q.copy()
    step = from_axis_angle(omega / rate, rate * dt)
    return normalize(multiply(step, q))
