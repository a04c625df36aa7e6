import struct
import zlib

import numpy as np

from sim3d import Body, Camera, World, encode_png, render
from sim3d.frame import BACKGROUND


def test_empty_world_is_background():
    image = render(World(), width=16, height=12)
    assert image.shape == (12, 16, 3) and image.dtype == np.uint8
    assert (image == np.array(BACKGROUND, dtype=np.uint8)).all()


def test_sphere_in_front_of_the_camera_is_seen():
    w = World()
    w.add(Body([0, 0, 0], radius=1.0, color=(255, 0, 0)))
    image = render(w, Camera(position=(0, 0, 5), target=(0, 0, 0)), width=21, height=21)
    assert image[10, 10, 0] > 100 and image[10, 10, 1] == 0
    assert (image[0, 0] == np.array(BACKGROUND, dtype=np.uint8)).all()


def test_png_holds_the_image():
    image = (np.arange(5 * 7 * 3) % 256).astype(np.uint8).reshape(5, 7, 3)
    data = encode_png(image)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (7, 5)
    idat = data.index(b"IDAT")
    (size,) = struct.unpack(">I", data[idat - 4:idat])
    raw = zlib.decompress(data[idat + 4:idat + 4 + size])
    rows = [raw[r * (1 + 21):(r + 1) * (1 + 21)] for r in range(5)]
    assert all(row[0] == 0 for row in rows)
    assert np.array_equal(np.frombuffer(b"".join(row[1:] for row in rows), np.uint8).reshape(5, 7, 3), image)
