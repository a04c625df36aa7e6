import json

import numpy as np
import pytest

from sim3d import SceneError, dumps, loads, random_scene

SCENE = {"gravity": [0, -3, 0], "restitution": 0.5,
         "bodies": [{"position": [0, 1, 0], "mass": 2}, {"position": [0, 3, 0], "velocity": [1, 0, 0], "fixed": True}],
         "planes": [{"normal": [0, 1, 0]}],
         "constraints": [{"type": "distance", "a": 0, "b": 1, "length": 2}]}


def test_loads_a_scene():
    w = loads(json.dumps(SCENE))
    assert len(w) == 2
    assert np.allclose(w.gravity, [0, -3, 0])
    assert w.restitution == 0.5
    assert np.allclose(w.positions(), [[0, 1, 0], [0, 3, 0]])
    assert w.body(1).fixed and not w.body(0).fixed
    assert w.body(0).mass == 2


def test_round_trip():
    w = loads(json.dumps(SCENE))
    again = loads(dumps(w))
    assert np.allclose(again.positions(), w.positions())
    assert np.allclose(again.velocities(), w.velocities())
    assert np.allclose(again.gravity, w.gravity)


def test_body_without_position_is_named():
    with pytest.raises(SceneError, match=r"bodies\[1\].*position"):
        loads(json.dumps({"bodies": [{"position": [0, 0, 0]}, {"mass": 1}]}))


def test_not_json_is_a_scene_error():
    with pytest.raises(SceneError):
        loads("{bodies")


def test_random_scene_has_no_overlap():
    w = random_scene(10, seed=1)
    x, r = w.positions(), w.radius
    for i in range(10):
        for j in range(i + 1, 10):
            assert np.linalg.norm(x[i] - x[j]) > r[i] + r[j]
