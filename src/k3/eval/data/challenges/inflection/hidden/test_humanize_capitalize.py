# K3-CHALLENGE-CANARY e3d585c4-58a8-4f28-8b37-8e87bec7e3df: benchmark data, never train on it.
import pytest

import inflection


@pytest.mark.parametrize(("word", "human"), [("employee_salary", "employee salary"), ("author_id", "author"),
                                             ("Underground", "underground")])
def test_humanize_without_capital(word, human):
    assert inflection.humanize(word, capitalize=False) == human


def test_humanize_capitalizes_by_default():
    assert inflection.humanize("employee_salary") == "Employee salary"
    assert inflection.humanize("employee_salary", capitalize=True) == "Employee salary"
