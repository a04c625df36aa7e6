import json

from sim3d import loads
from sim3d.cli import info

SCENE = {"gravity": [0, -10, 0], "bodies": [{"position": [0, 1, 0], "mass": 2}],
         "ropes": [{"start": [0, 5, 0], "end": [2, 5, 0], "beads": 3, "pin_start": True}]}


def test_info_describes_the_scene():
    w = loads(json.dumps(SCENE))
    got = info(w)
    assert got["bodies"] == 4 and got["fixed"] == 1 and got["constraints"] == 2
    assert got["constraint_error"] == 0.0
    assert abs(got["energy"] - w.energy()) < 1e-9
    assert abs(got["energy"] - (2 * 10 * 1 + 2 * 10 * 5)) < 1e-9
    json.dumps(got)
