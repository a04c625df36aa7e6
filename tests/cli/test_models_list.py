"""`k3 models` (issue 69: no list of downloaded models): the bundled model, k3's downloads and the hub cache's
K3 snapshots, each with its size and whether its download is complete."""

from __future__ import annotations

import json
import shutil

from k3.cli.main import main


def test_models_lists_what_is_here_and_what_is_incomplete(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    mine, hub = tmp_path / "models", tmp_path / "hub"
    shutil.copytree(tiny_checkpoint, mine / "org" / "whole")
    shutil.copytree(tiny_checkpoint, mine / "org" / "cut")
    next((mine / "org" / "cut").glob("*.safetensors")).unlink()
    snapshot = hub / "models--moonshotai--Kimi-K3" / "snapshots" / "abc"
    shutil.copytree(tiny_checkpoint, snapshot)
    (hub / "models--moonshotai--Kimi-K3" / "refs").mkdir()
    (hub / "models--moonshotai--Kimi-K3" / "refs" / "main").write_text("abc")
    monkeypatch.setenv("K3_MODELS_DIR", str(mine))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert main(["models", "--json"]) == 0
    found = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert list(found) == ["default", "org/cut", "org/whole", "moonshotai/Kimi-K3"]
    assert found["org/whole"]["status"] == "complete" and found["moonshotai/Kimi-K3"]["status"] == "complete"
    assert found["org/cut"]["status"].startswith("incomplete: 1 of") and "k3 download" in found["org/cut"]["status"]
    size = sum(p.stat().st_size for p in tiny_checkpoint.rglob("*") if p.is_file())
    assert found["org/whole"]["bytes"] == size
    assert main(["models"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["MODEL", "SIZE", "STATUS"] and any(line.startswith("org/cut ") for line in table)
