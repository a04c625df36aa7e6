"""Collision response: an impulse along the contact normal, then the overlap pushed apart.

Impulses are equal and opposite, so momentum is kept; with restitution 1 kinetic energy is kept too.
The overlap is removed by moving each body in proportion to its inverse mass (a fixed body never moves)."""

import numpy as np

from sim3d.collide import Contact, PlaneContact


def resolve_pair(c: Contact, x: np.ndarray, v: np.ndarray, inv_mass: np.ndarray, restitution: float) -> None:
    """Resolve one sphere-sphere contact in place."""
    ia, ib = inv_mass[c.a], inv_mass[c.b]
    total = ia + ib
    if total == 0.0:
        return
    approach = float((v[c.b] - v[c.a]) @ c.normal)
    if approach < 0.0:
        j = -(1.0 + restitution) * approach / total
        v[c.a] -= j * ia * c.normal
        v[c.b] += j * ib * c.normal
    push = c.depth / total
    x[c.a] -= push * ia * c.normal
    x[c.b] += push * ib * c.normal


def resolve_plane(c: PlaneContact, x: np.ndarray, v: np.ndarray, inv_mass: np.ndarray, restitution: float) -> None:
    """Resolve one sphere-plane contact in place (the plane is immovable)."""
    if inv_mass[c.body] == 0.0:
        return
    approach = float(v[c.body] @ c.normal)
    if approach < 0.0:
        v[c.body] -= (1.0 + restitution) * approach * c.normal
    x[c.body] += c.depth * c.normal


def resolve(contacts, x: np.ndarray, v: np.ndarray, inv_mass: np.ndarray, restitution: float) -> None:
    for c in contacts:
        if isinstance(c, PlaneContact):
            resolve_plane(c, x, v, inv_mass, restitution)
        else:
            resolve_pair(c, x, v, inv_mass, restitution)
