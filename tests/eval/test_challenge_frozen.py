"""A challenge is frozen: each task's prompt and the repository are pinned by sha256, so an edit in place is
refused before anything runs, and a change needs a new version (whose results are never compared with
the old one's). `python -m k3.eval.challenge list` shows the hashes."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from k3.eval.challenge import __main__ as challenge_cli
from k3.eval.challenge import loading, source, spec
from k3.eval.challenge.spec import ChallengeError


@pytest.fixture
def copy(tmp_path):
    root = tmp_path / "sim3d"
    shutil.copytree(spec.BUNDLED, root)
    return root


def test_the_bundled_challenges_are_frozen_and_big_enough():
    for directory in (spec.BUNDLED, spec.INFLECTION):
        ch = loading.load(directory)
        assert ch.frozen and ch.frozen["version"] == ch.version
    ch = loading.load(spec.BUNDLED)
    assert ch.label == "sim3d-1" and len(ch.every_task) >= 20
    assert {t.kind for t in ch.tasks} == {"bug", "feature"} and len(ch.chains[0].steps) >= 3
    source.pristine(ch)                                    # the shipped repository matches its hash


def test_list_prints_each_prompt_hash(capsys):
    assert challenge_cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    ch = loading.load(spec.BUNDLED)
    assert lines[0].startswith("sim3d-1 ") and len(lines) == 1 + len(ch.every_task)
    for line, task in zip(lines[1:], ch.every_task):
        assert line.split()[0] == task.id
        assert line.split()[-1] == hashlib.sha256(ch.prompt(task).encode()).hexdigest()


def test_a_prompt_edited_in_place_is_refused(copy):
    raw = json.loads((copy / "challenge.json").read_text())
    raw["tasks"][0]["prompt"] += " Please."
    (copy / "challenge.json").write_text(json.dumps(raw))
    with pytest.raises(ChallengeError, match="quat-product-sign was edited in place.*new challenge version"):
        loading.load(copy)
    assert challenge_cli.main(["freeze", str(copy)]) == 2          # the same version cannot take new prompts
    raw["version"] = "2"
    (copy / "challenge.json").write_text(json.dumps(raw))
    assert challenge_cli.main(["freeze", str(copy)]) == 0
    assert loading.load(copy).label == "sim3d-2"


def test_a_template_edit_changes_every_hash(copy):
    (copy / "prompt.md").write_text((copy / "prompt.md").read_text() + "\nBe quick.\n")
    with pytest.raises(ChallengeError, match="edited in place"):
        loading.load(copy)


def test_a_repository_edited_in_place_is_refused(copy):
    path = copy / "repo" / "sim3d" / "world.py"
    path.write_text(path.read_text() + "\n# tweaked\n")
    ch = loading.load(copy)                                    # the prompts still match
    with pytest.raises(ChallengeError, match="repository does not match the frozen sha256"):
        source.pristine(ch)
