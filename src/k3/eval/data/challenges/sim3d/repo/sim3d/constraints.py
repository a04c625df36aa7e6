"""Distance constraints: a massless rigid rod between two bodies (a pendulum when one is fixed)."""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Distance:
    """Bodies `a` and `b` stay `length` apart."""
    a: int
    b: int
    length: float

    def error(self, x: np.ndarray) -> float:
        """How far the bodies are from the rod's length (positive: stretched)."""
        return float(np.linalg.norm(x[self.b] - x[self.a]) - self.length)

    def solve(self, x: np.ndarray, v: np.ndarray, inv_mass: np.ndarray) -> None:
        """Move both ends to the rod's length and cancel their relative velocity along the rod, each in
        proportion to its inverse mass (equal and opposite: momentum is kept)."""
        ia, ib = inv_mass[self.a], inv_mass[self.b]
        total = ia + ib
        d = x[self.b] - x[self.a]
        dist = float(np.linalg.norm(d))
        if total == 0.0 or dist == 0.0:
            return
        n = d / dist
        stretch = (dist - self.length) / total
        x[self.a] += stretch * ia * n
        x[self.b] -= stretch * ib * n
        along = float((v[self.b] - v[self.a]) @ n) / total
        v[self.a] += along * ia * n
        v[self.b] -= along * ib * n
