"""benchmarks/decode_settings.py: every CPU-dependent decode setting's default is measured against each
value the environment table accepts for it, one setting at a time."""

from __future__ import annotations

import sys
from pathlib import Path

from k3.config import env

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from decode_settings import SETTINGS, defaults, forms  # noqa: E402


def test_each_setting_runs_alone_against_the_defaults_with_every_other_value():
    f = forms()
    assert f.pop("default") == {}
    assert set(defaults()) == set(SETTINGS)
    for var, value in defaults().items():
        runs = [e for e in f.values() if var in e]
        assert all(len(e) == 1 for e in runs)
        assert {e[var] for e in runs} == set(env.BY_NAME[var].choices) - {value}
