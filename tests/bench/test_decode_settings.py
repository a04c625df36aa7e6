"""benchmarks/decode_settings.py: every CPU-dependent decode setting is measured flipped, against the
defaults, and each flipped value is one the environment table accepts."""

from __future__ import annotations

import sys
from pathlib import Path

from k3.config import env
from k3.ops.native import decode_gemv, weight_prefetch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from decode_settings import OTHER, forms  # noqa: E402


def test_each_setting_is_flipped_alone_against_the_defaults():
    f = forms()
    assert f.pop("default") == {}
    defaults = {"K3_DECODE_GEMV": decode_gemv(), "K3_WEIGHT_PREFETCH": weight_prefetch()}
    assert set(defaults) == set(OTHER)
    for var, value in defaults.items():
        (flipped,) = [e for e in f.values() if var in e]
        assert flipped == {var: OTHER[var][value]} and flipped[var] != value
        assert set(OTHER[var]) == set(env.BY_NAME[var].choices)   # both choices, as the table names them
