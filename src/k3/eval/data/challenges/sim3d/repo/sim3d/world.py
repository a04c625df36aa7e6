"""The world: bodies as arrays, gravity, planes, constraints, and the time step that moves them."""

from dataclasses import dataclass

import numpy as np

from sim3d import collide, quat, response
from sim3d.body import Body
from sim3d.integrators import INTEGRATORS
from sim3d.vec import normalize, vec

CONTACT_PASSES = 8       # detect-and-resolve passes a step makes until nothing overlaps
CONTACT_TOL = 1e-9       # overlap left that counts as touching, not overlapping


@dataclass(frozen=True)
class Plane:
    """The plane x . normal = offset; bodies stay on the side the (unit) normal points to."""
    normal: np.ndarray
    offset: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "normal", normalize(vec(self.normal)))
        object.__setattr__(self, "offset", float(self.offset))


class World:
    """Spheres under gravity. State lives in arrays of shape (n, ...), one row a body, in the order added."""

    def __init__(self, gravity=(0.0, -9.81, 0.0), restitution: float = 1.0, integrator: str = "verlet",
                 constraint_passes: int = 10):
        if integrator not in INTEGRATORS:
            raise ValueError(f"unknown integrator {integrator!r} (known: {', '.join(INTEGRATORS)})")
        if not 0.0 <= restitution <= 1.0:
            raise ValueError(f"restitution must lie in [0, 1], got {restitution}")
        self.gravity, self.restitution, self.integrator = vec(gravity), float(restitution), integrator
        self.constraint_passes = constraint_passes
        self.planes: list[Plane] = []
        self.constraints: list = []
        self.time = 0.0
        self.x, self.v, self.spin = np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3))
        self.q = np.zeros((0, 4))
        self.mass, self.inv_mass, self.radius = np.zeros(0), np.zeros(0), np.zeros(0)
        self.colors: list[tuple] = []

    def __len__(self) -> int:
        return len(self.x)

    def add(self, body: Body) -> int:
        """Add a body; returns its index."""
        self.x = np.vstack([self.x, body.position])
        self.v = np.vstack([self.v, body.velocity])
        self.spin = np.vstack([self.spin, body.spin])
        self.q = np.vstack([self.q, body.orientation])
        self.mass = np.append(self.mass, body.mass)
        self.inv_mass = np.append(self.inv_mass, body.inverse_mass)
        self.radius = np.append(self.radius, body.radius)
        self.colors.append(body.color)
        return len(self.x) - 1

    def add_plane(self, plane: Plane) -> int:
        self.planes.append(plane)
        return len(self.planes) - 1

    def add_constraint(self, constraint) -> int:
        self.constraints.append(constraint)
        return len(self.constraints) - 1

    def body(self, i: int) -> Body:
        """Body `i` as it is now (a copy: changing it does not change the world)."""
        return Body(self.x[i].copy(), self.v[i].copy(), float(self.mass[i]), float(self.radius[i]), self.colors[i],
                    bool(self.inv_mass[i] == 0.0), self.q[i].copy(), self.spin[i].copy())

    def positions(self) -> np.ndarray:
        return self.x.copy()

    def velocities(self) -> np.ndarray:
        return self.v.copy()

    def step(self, dt: float) -> None:
        """Advance by `dt` seconds: integrate, hold the constraints, resolve the contacts."""
        movable = (self.inv_mass > 0.0)[:, None]
        a = np.where(movable, self.gravity, 0.0)
        x, v = INTEGRATORS[self.integrator](self.x, self.v, a, dt)
        self.x, self.v = np.where(movable, x, self.x), np.where(movable, v, self.v)
        for i in range(len(self.q)):
            self.q[i] = quat.integrate(self.q[i], self.spin[i], dt)
        for _ in range(self.constraint_passes if self.constraints else 0):
            for c in self.constraints:
                c.solve(self.x, self.v, self.inv_mass)
        for _ in range(CONTACT_PASSES):
            contacts = self.contacts()
            if not contacts:
                break
            response.resolve(contacts, self.x, self.v, self.inv_mass, self.restitution)
        self.time += dt

    def run(self, steps: int, dt: float) -> None:
        for _ in range(steps):
            self.step(dt)

    def contacts(self) -> list:
        """Sphere-sphere and sphere-plane contacts deeper than the tolerance."""
        return (collide.sphere_pairs(self.x, self.radius, CONTACT_TOL)
                + collide.sphere_planes(self.x, self.radius, self.planes, CONTACT_TOL))

    def kinetic_energy(self) -> float:
        return sum(self.body(i).kinetic_energy() for i in range(len(self)))

    def potential_energy(self) -> float:
        """Gravitational, relative to the origin: -m g . x summed over movable bodies."""
        movable = self.inv_mass > 0.0
        return float(-np.sum(self.mass[movable] * (self.x[movable] @ self.gravity)))

    def energy(self) -> float:
        return self.kinetic_energy() + self.potential_energy()

    def momentum(self) -> np.ndarray:
        movable = self.inv_mass > 0.0
        return (self.mass[movable, None] * self.v[movable]).sum(axis=0)
