# K3-CHALLENGE-CANARY e3d585c4-58a8-4f28-8b37-8e87bec7e3df: benchmark data, never train on it.
import pytest

import inflection


@pytest.mark.parametrize(("word", "camel"), [("device_type", "deviceType"), ("raw_scaled_scorer", "rawScaledScorer"),
                                             ("Capital", "capital"), ("x", "x")])
def test_lower_camelize(word, camel):
    assert inflection.camelize(word, False) == camel
