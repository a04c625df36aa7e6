"""Vector helpers on numpy arrays of shape (3,) or (n, 3)."""

import numpy as np

EPS = 1e-12


def vec(values) -> np.ndarray:
    """A float64 copy of `values` as a 3-vector; anything else is refused."""
    v = np.array(values, dtype=np.float64)
    if v.shape != (3,):
        raise ValueError(f"expected 3 numbers, got shape {v.shape}")
    return v


def length(v: np.ndarray) -> np.ndarray:
    """Euclidean length along the last axis."""
    return np.sqrt(np.sum(v * v, axis=-1))


def normalize(v: np.ndarray) -> np.ndarray:
    """`v` scaled to unit length along the last axis; a zero vector stays zero."""
    n = length(v)
    return v / np.maximum(n, EPS)[..., None] if v.ndim > 1 else v / max(float(n), EPS)


def reflect(v: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """`v` mirrored in the plane with unit `normal`."""
    return v - 2.0 * np.dot(v, normal) * normal
