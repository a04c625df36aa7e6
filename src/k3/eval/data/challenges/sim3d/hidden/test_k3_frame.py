"""Hidden acceptance check of sim3d's frame: the render matches a reference ray tracer written here
(pixel by pixel within a tolerance that allows for edge pixels), and the PNG decodes to that frame."""

import struct
import zlib

import numpy as np

from sim3d import Body, Camera, World, encode_png, render

BACKGROUND, AMBIENT = np.array([24, 26, 32], dtype=np.float64), 0.15


def _reference(spheres, eye, target, fov, width, height, light):
    eye, target = np.asarray(eye, float), np.asarray(target, float)
    f = (target - eye) / np.linalg.norm(target - eye)
    r = np.cross(f, [0.0, 1.0, 0.0])
    r /= np.linalg.norm(r)
    u = np.cross(r, f)
    half = np.tan(np.radians(fov) / 2)
    light = np.asarray(light, float) / np.linalg.norm(light)
    out = np.zeros((height, width, 3))
    for row in range(height):
        for col in range(width):
            px = (2 * (col + 0.5) / width - 1) * half * width / height
            py = (1 - 2 * (row + 0.5) / height) * half
            d = f + px * r + py * u
            d /= np.linalg.norm(d)
            best, color = np.inf, BACKGROUND
            for centre, radius, rgb in spheres:
                oc = eye - np.asarray(centre, float)
                b = d @ oc
                disc = b * b - (oc @ oc - radius * radius)
                if disc < 0:
                    continue
                t = -b - np.sqrt(disc)
                if 0 < t < best:
                    n = (eye + t * d - centre) / radius
                    best = t
                    color = (AMBIENT + (1 - AMBIENT) * max(0.0, n @ light)) * np.asarray(rgb, float)
            out[row, col] = color
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


SPHERES = [([0.0, 0.0, 0.0], 1.0, (220, 60, 50)), ([1.8, 0.6, -1.0], 0.7, (60, 200, 90)),
           ([-1.5, -0.4, 0.8], 0.5, (70, 90, 230))]


def _world():
    w = World(gravity=(0, 0, 0))
    for centre, radius, rgb in SPHERES:
        w.add(Body(centre, radius=radius, color=rgb))
    return w


def test_frame_matches_the_reference():
    width, height = 40, 24
    camera = Camera(position=(1.0, 1.5, 7.0), target=(0.0, 0.0, 0.0), fov=45.0)
    got = np.asarray(render(_world(), camera, width, height), dtype=np.int64)
    want = _reference(SPHERES, (1.0, 1.5, 7.0), (0, 0, 0), 45.0, width, height, (-0.4, 1.0, 0.6)).astype(np.int64)
    assert got.shape == want.shape
    diff = np.abs(got - want).max(axis=2)
    assert diff.mean() < 1.0
    assert (diff > 8).mean() < 0.02


def test_png_decodes_to_the_frame():
    image = np.asarray(render(_world(), Camera(), 24, 16))
    data = encode_png(image)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + size]
        assert struct.unpack(">I", data[pos + 8 + size:pos + 12 + size])[0] == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + size
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (width, height, depth, colour) == (24, 16, 8, 2)
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = 1 + 3 * width
    assert len(raw) == stride * height
    rows = [raw[r * stride:(r + 1) * stride] for r in range(height)]
    assert all(row[0] == 0 for row in rows)
    pixels = np.frombuffer(b"".join(row[1:] for row in rows), np.uint8).reshape(height, width, 3)
    assert np.array_equal(pixels, image)
