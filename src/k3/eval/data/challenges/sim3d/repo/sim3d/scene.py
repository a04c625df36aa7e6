"""The scene file: a world as JSON, and random scenes drawn from a seed.

    {"sim3d": 1, "gravity": [0, -9.81, 0], "restitution": 0.9,
     "bodies": [{"position": [x, y, z], "velocity": [...], "mass": 1, "radius": 0.5, "color": [r, g, b],
                 "fixed": false}],
     "planes": [{"normal": [0, 1, 0], "offset": 0}],
     "constraints": [{"type": "distance", "a": 0, "b": 1, "length": 2}]}

Only "bodies" is required; every body needs a "position"."""

import json

import numpy as np

from sim3d.body import Body
from sim3d.constraints import Distance
from sim3d.world import Plane, World

FORMAT = 1


class SceneError(ValueError):
    """A scene that cannot be read, with the place at fault."""


def loads(text: str) -> World:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SceneError(f"not JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("bodies"), list):
        raise SceneError('a scene is an object with a list "bodies"')
    if raw.get("sim3d", FORMAT) != FORMAT:
        raise SceneError(f"scene format {raw['sim3d']} is not supported (this sim3d reads format {FORMAT})")
    world = World(gravity=raw.get("gravity", (0.0, -9.81, 0.0)), restitution=raw.get("restitution", 1.0))
    for n, b in enumerate(raw["bodies"]):
        world.add(_body(b, f"bodies[{n}]"))
    for n, p in enumerate(raw.get("planes", [])):
        world.add_plane(Plane(_field(p, "normal", f"planes[{n}]"), p.get("offset", 0.0)))
    for n, c in enumerate(raw.get("constraints", [])):
        where = f"constraints[{n}]"
        if c.get("type") != "distance":
            raise SceneError(f'{where}: unknown type {c.get("type")!r} (known: "distance")')
        a, b = int(_field(c, "a", where)), int(_field(c, "b", where))
        if not (0 <= a < len(world) and 0 <= b < len(world)):
            raise SceneError(f"{where}: names a body that does not exist (the scene has {len(world)})")
        world.add_constraint(Distance(a, b, float(_field(c, "length", where))))
    return world


def load(path) -> World:
    with open(path, encoding="utf-8") as f:
        return loads(f.read())


def dumps(world: World) -> str:
    """The world as scene JSON; loads(dumps(w)) rebuilds the same state."""
    bodies = [{"position": world.x[i].tolist(), "velocity": world.v[i].tolist(), "mass": float(world.mass[i]),
               "radius": float(world.radius[i]), "color": list(world.colors[i]), "fixed": bool(world.inv_mass[i] == 0)}
              for i in range(len(world))]
    return json.dumps({"sim3d": FORMAT, "gravity": world.gravity.tolist(), "restitution": world.restitution,
                       "bodies": bodies,
                       "planes": [{"normal": p.normal.tolist(), "offset": p.offset} for p in world.planes],
                       "constraints": [{"type": "distance", "a": c.a, "b": c.b, "length": c.length}
                                       for c in world.constraints]}, indent=1)


def _field(raw, key: str, where: str):
    if not isinstance(raw, dict) or key not in raw:
        raise SceneError(f'{where}: missing field "{key}"')
    return raw[key]


def _body(raw, where: str) -> Body:
    try:
        return Body(_field(raw, "position", where), raw.get("velocity", (0.0, 0.0, 0.0)), raw.get("mass", 1.0),
                    raw.get("radius", 0.5), tuple(raw.get("color", (200, 80, 60))), bool(raw.get("fixed", False)))
    except (TypeError, ValueError) as e:
        raise SceneError(f"{where}: {e}") from None


def random_scene(n: int, seed: int, box: float = 4.0, speed: float = 2.0, gravity=(0.0, 0.0, 0.0)) -> World:
    """`n` spheres placed without overlap in the cube [-box, box]^3, walled by six planes, with random
    velocities, masses and colours drawn from `seed` (the same seed, the same scene)."""
    rng = np.random.default_rng(seed)
    world = World(gravity=gravity, restitution=1.0)
    for axis in range(3):
        for sign in (1.0, -1.0):
            normal = np.zeros(3)
            normal[axis] = sign
            world.add_plane(Plane(normal, -box))
    while len(world) < n:
        radius = rng.uniform(0.25, 0.6)
        p = rng.uniform(-box + radius, box - radius, 3)
        if all(np.linalg.norm(p - world.x[i]) > radius + world.radius[i] for i in range(len(world))):
            color = tuple(int(c) for c in rng.integers(60, 255, 3))
            world.add(Body(p, rng.normal(0.0, speed, 3), rng.uniform(0.5, 3.0), radius, color))
    return world
