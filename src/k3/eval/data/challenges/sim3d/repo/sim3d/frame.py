"""A frame of the world: spheres ray-traced through a pinhole camera, lit by one directional light,
as an RGB image (height, width, 3) of uint8, and that image encoded as PNG (zlib only)."""

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from sim3d.vec import normalize, vec

BACKGROUND = (24, 26, 32)
AMBIENT = 0.15


@dataclass(frozen=True)
class Camera:
    """A pinhole camera at `position` looking at `target`; `fov` is the vertical field of view in degrees."""
    position: tuple = (0.0, 2.0, 10.0)
    target: tuple = (0.0, 0.0, 0.0)
    up: tuple = (0.0, 1.0, 0.0)
    fov: float = 50.0

    def rays(self, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
        """(origin (3,), unit directions (height, width, 3)) through each pixel's centre."""
        eye = vec(self.position)
        forward = normalize(vec(self.target) - eye)
        right = normalize(np.cross(forward, vec(self.up)))
        up = np.cross(right, forward)
        half = np.tan(np.radians(self.fov) / 2.0)
        aspect = width / height
        xs = (2.0 * (np.arange(width) + 0.5) / width - 1.0) * half * aspect
        ys = (1.0 - 2.0 * (np.arange(height) + 0.5) / height) * half
        d = forward + xs[None, :, None] * right + ys[:, None, None] * up
        return eye, normalize(d.reshape(-1, 3)).reshape(height, width, 3)


def render(world, camera: Camera = Camera(), width: int = 64, height: int = 48, light=(-0.4, 1.0, 0.6)) -> np.ndarray:
    """The world's spheres seen from `camera` -> uint8 image (height, width, 3)."""
    eye, d = camera.rays(width, height)
    to_light = normalize(vec(light))
    nearest = np.full((height, width), np.inf)
    image = np.empty((height, width, 3))
    image[:] = BACKGROUND
    for i in range(len(world.x)):
        oc = eye - world.x[i]
        b = d @ oc
        disc = b * b - (oc @ oc - world.radius[i] ** 2)
        t = -b - np.sqrt(np.maximum(disc, 0.0))
        hit = (disc >= 0.0) & (t > 0.0) & (t < nearest)
        nearest = np.where(hit, t, nearest)
        points = eye + t[..., None] * d
        normals = normalize((points - world.x[i]).reshape(-1, 3)).reshape(height, width, 3)
        shade = AMBIENT + (1.0 - AMBIENT) * np.clip(normals @ to_light, 0.0, 1.0)
        image[hit] = (shade[..., None] * np.asarray(world.colors[i], dtype=np.float64))[hit]
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def encode_png(image: np.ndarray) -> bytes:
    """An RGB uint8 image (height, width, 3) as PNG bytes (8-bit truecolour, no filtering)."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected an image of shape (height, width, 3), got {image.shape}")
    height, width = image.shape[:2]
    raw = b"".join(b"\x00" + image[row].tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def write_png(path, image: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(encode_png(image))
