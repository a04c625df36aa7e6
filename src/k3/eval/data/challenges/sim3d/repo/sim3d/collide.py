"""Collision detection: which spheres touch each other or a plane, and how deep."""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Contact:
    """Body `a` touches body `b`; `normal` is the unit vector from a's centre towards b's; `depth` > 0 is how
    far they overlap."""
    a: int
    b: int
    normal: np.ndarray
    depth: float


@dataclass(frozen=True)
class PlaneContact:
    """Body `body` pokes `depth` through plane number `plane`; `normal` is the plane's (pointing to free space)."""
    body: int
    plane: int
    normal: np.ndarray
    depth: float


def sphere_pairs(x: np.ndarray, radius: np.ndarray, tol: float = 0.0) -> list[Contact]:
    """Every overlapping pair i < j of spheres at positions `x` (n, 3) with radii `radius` (n,)."""
    n = len(x)
    if n < 2:
        return []
    i, j = np.triu_indices(n, k=1)
    d = x[j] - x[i]
    dist = np.sqrt(np.sum(d * d, axis=1))
    depth = radius[i] + radius[j] - dist
    out = []
    for k in np.nonzero(depth > tol)[0]:
        normal = d[k] / dist[k] if dist[k] > 0 else np.array([0.0, 1.0, 0.0])
        out.append(Contact(int(i[k]), int(j[k]), normal, float(depth[k])))
    return out


def sphere_planes(x: np.ndarray, radius: np.ndarray, planes, tol: float = 0.0) -> list[PlaneContact]:
    """Every sphere that reaches below a plane (a plane keeps spheres on the side its normal points to)."""
    out = []
    for p, plane in enumerate(planes):
        depth = radius - (x @ plane.normal - plane.offset)
        for k in np.nonzero(depth > tol)[0]:
            out.append(PlaneContact(int(k), p, plane.normal, float(depth[k])))
    return out


def max_overlap(x: np.ndarray, radius: np.ndarray, planes=()) -> float:
    """The deepest overlap between two spheres or a sphere and a plane (0 when nothing overlaps)."""
    depths = [c.depth for c in sphere_pairs(x, radius)] + [c.depth for c in sphere_planes(x, radius, planes)]
    return max(depths, default=0.0)
