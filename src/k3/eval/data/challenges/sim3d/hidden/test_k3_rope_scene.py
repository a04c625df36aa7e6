import json

import numpy as np
import pytest

from sim3d import SceneError, loads

SCENE = {"bodies": [{"position": [0, 0, 0]}, {"position": [1, 0, 0]}],
         "constraints": [{"type": "distance", "a": 0, "b": 1, "length": 1}],
         "ropes": [{"start": [0, 5, 0], "end": [4, 5, 0], "beads": 5, "mass": 2, "pin_start": True},
                   {"start": [0, 8, 0], "end": [0, 8, 1], "beads": 2}]}


def test_ropes_come_after_the_bodies():
    w = loads(json.dumps(SCENE))
    assert len(w) == 9 and len(w.constraints) == 1 + 4 + 1
    assert np.allclose(w.positions()[2:7, 0], [0, 1, 2, 3, 4])
    assert w.body(2).fixed and not w.body(3).fixed and w.body(3).mass == 2
    assert not w.body(7).fixed and w.body(7).mass == 1


@pytest.mark.parametrize("field", ["start", "end", "beads"])
def test_a_rope_missing_a_field_is_named(field):
    rope = {"start": [0, 0, 0], "end": [1, 0, 0], "beads": 3}
    del rope[field]
    with pytest.raises(SceneError, match=rf"ropes\[0\].*{field}"):
        loads(json.dumps({"bodies": [], "ropes": [rope]}))


def test_scene_without_ropes_loads_as_before():
    assert len(loads(json.dumps({"bodies": [{"position": [0, 0, 0]}]}))) == 1
