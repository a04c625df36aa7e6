"""report.md's plots: refusal rates by category and constraint retention by conversation length, as PNG
files beside the report; without matplotlib a one-line note instead."""

from __future__ import annotations

import builtins

from fake_models import AlwaysRefuses
from k3.eval.registry import make_tasks
from k3.eval.runner import run_eval
from k3.eval.tasks.base import Settings

SETTINGS = Settings(constraint_lengths=(0, 2))


def test_report_shows_refusal_and_constraint_plots(tmp_path):
    run_eval(AlwaysRefuses(), make_tasks("refusal,constraints", SETTINGS), SETTINGS, tmp_path, limit=4, progress=False)
    md = (tmp_path / "report.md").read_text()
    assert "## Plots" in md
    for name in ("plot-refusal.png", "plot-constraints.png"):
        assert f"]({name})" in md
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.tmp.png")), "figures are renamed into place"


def test_without_matplotlib_the_report_says_what_to_install(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    run_eval(AlwaysRefuses(), make_tasks("refusal", SETTINGS), SETTINGS, tmp_path, limit=2, progress=False)
    md = (tmp_path / "report.md").read_text()
    assert "Plots need the `[bench]` extra" in md and not list(tmp_path.glob("*.png"))
