"""sim3d: spheres in 3D with gravity, collisions, constraints, a scene format and a renderer."""

from sim3d.body import Body
from sim3d.constraints import Distance
from sim3d.frame import Camera, encode_png, render
from sim3d.scene import SceneError, dumps, load, loads, random_scene
from sim3d.world import Plane, World

__all__ = ["Body", "Camera", "Distance", "Plane", "SceneError", "World", "dumps", "encode_png", "load", "loads",
           "random_scene", "render"]
__version__ = "1.0.0"
