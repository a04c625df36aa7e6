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


def test_the_wide_checkpoint_has_k3s_row_lengths():
    """Most of its trunk's bytes lie in rows of 7 KB and more, as in K3's, where compare.py's lie in 4 KB rows."""
    from decode_settings import wide_config

    from k3.checkpoint.layout import layer_tensors

    c = wide_config()
    mats = [t.shape for i in range(c.num_hidden_layers) for t in layer_tensors(c, i)
            if len(t.shape) == 2 and "experts." not in t.name]
    long_rows = sum(o * k for o, k in mats if 2 * k >= 7 * 1024)
    assert c.hidden_size == 7168 and long_rows > 0.8 * sum(o * k for o, k in mats)


def test_every_checkpoint_is_a_valid_config():
    from decode_settings import CHECKPOINTS

    assert {name: make().hidden_size for name, make in CHECKPOINTS.items()} == {"compare": 2048, "wide": 7168,
                                                                                 "small": 1024}
