# K3-CHALLENGE-CANARY e3d585c4-58a8-4f28-8b37-8e87bec7e3df: benchmark data, never train on it.
import pytest

import inflection


@pytest.mark.parametrize(("word", "constant"), [("DeviceType", "DEVICE_TYPE"), ("device-type", "DEVICE_TYPE"),
                                                ("puni puni", "PUNI_PUNI"), ("already_snake", "ALREADY_SNAKE"),
                                                ("HTTPServer", "HTTP_SERVER")])
def test_constant_case(word, constant):
    assert inflection.constant_case(word) == constant
