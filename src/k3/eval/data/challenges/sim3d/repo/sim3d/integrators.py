"""Time steppers for positions and velocities under an acceleration that is constant over the step.

Each takes arrays x, v of shape (n, 3), the acceleration a (n, 3) and the step dt, and returns the new
(x, v). Velocity Verlet is exact for a constant acceleration (free fall keeps its energy); semi-implicit
Euler is first order and kept for comparison."""

import numpy as np


def verlet(x: np.ndarray, v: np.ndarray, a: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Velocity Verlet: x' = x + v dt + a dt^2 / 2, v' = v + a dt."""
    return x + v * dt + 0.5 * a * dt * dt, v + a * dt


def semi_implicit_euler(x: np.ndarray, v: np.ndarray, a: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """v' = v + a dt, then x' = x + v' dt."""
    v = v + a * dt
    return x + v * dt, v


INTEGRATORS = {"verlet": verlet, "semi-implicit-euler": semi_implicit_euler}
