"""A body: a solid sphere with mass, or fixed in place (infinite mass)."""

from dataclasses import dataclass, field

import numpy as np

from sim3d import quat
from sim3d.vec import vec


@dataclass
class Body:
    """A sphere of `radius` and `mass` (kg); `fixed` bodies never move (their inverse mass is 0)."""
    position: np.ndarray
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    mass: float = 1.0
    radius: float = 0.5
    color: tuple = (200, 80, 60)
    fixed: bool = False
    orientation: np.ndarray = field(default_factory=quat.identity)
    spin: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def __post_init__(self):
        self.position, self.velocity, self.spin = vec(self.position), vec(self.velocity), vec(self.spin)
        self.orientation = quat.normalize(np.asarray(self.orientation, dtype=np.float64))
        if not self.mass > 0 or not self.radius > 0:
            raise ValueError(f"a body needs a positive mass and radius (got mass={self.mass}, radius={self.radius})")
        self.color = tuple(int(c) for c in self.color)

    @property
    def inverse_mass(self) -> float:
        return 0.0 if self.fixed else 1.0 / self.mass

    def kinetic_energy(self) -> float:
        """Translational plus rotational (a solid sphere's moment of inertia is 2/5 m r^2)."""
        if self.fixed:
            return 0.0
        inertia = 0.4 * self.mass * self.radius ** 2
        return 0.5 * self.mass * float(self.velocity @ self.velocity) + 0.5 * inertia * float(self.spin @ self.spin)

    def momentum(self) -> np.ndarray:
        return np.zeros(3) if self.fixed else self.mass * self.velocity
