"""Images from the command line: `k3 generate --image`, `k3 bench` with image requests (synthetic and a
dataset that names files), and the plan that counts the tower."""

from __future__ import annotations

import json

import pytest

from images_support import encoded
from k3.cli.main import main
from k3.config.presets import released
from k3.streaming import plan_memory
from k3.streaming.vision_memory import vision_activation_bytes, vision_weight_bytes


def test_generate_with_an_image(vision_checkpoint, tmp_path, capsys):
    picture = tmp_path / "p.jpg"
    picture.write_bytes(encoded(fmt="JPEG", noise=13))
    argv = ["generate", "--model", str(vision_checkpoint), "--max-tokens", "3", "--cache-memory", "64MiB"]
    assert main([*argv, "--prompt", "Describe:", "--image", str(picture)]) == 0
    with_image = capsys.readouterr().err
    assert main([*argv, "--prompt", "Describe:"]) == 0
    without = capsys.readouterr().err
    tokens = lambda err: int(err.split("[prompt ")[1].split(" tokens")[0])   # noqa: E731
    assert tokens(with_image) > tokens(without)
    assert main([*argv, "--prompt", "x", "--image", str(tmp_path / "missing.png")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_bench_sends_synthetic_images_and_dataset_images(vision_checkpoint, tmp_path, capsys):
    common = ["bench", "--model", str(vision_checkpoint), "--num-prompts", "3", "--output-len", "2", "--input-len", "8",
              "--cache-memory", "64MiB", "--warmup", "0", "--json"]
    assert main([*common, "--images-per-prompt", "2", "--image-size", "90x60"]) == 0
    synthetic = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert synthetic["completed"] == 3 and synthetic["failed"] == 0
    assert synthetic["total_input_tokens"] > 3 * 2 * 6                  # each 90x60 image is 6 rows
    (tmp_path / "a.png").write_bytes(encoded(noise=14))
    (tmp_path / "set.jsonl").write_text(json.dumps({"prompt": "what is it?", "images": ["a.png"]}) + "\n")
    assert main([*common[:-1], "--dataset", str(tmp_path / "set.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["completed"] == 1
    assert main([*common, "--images-per-prompt", "1", "--api", "completions"]) == 2
    assert "chat endpoints" in capsys.readouterr().err


def test_the_plan_counts_the_tower_and_no_vision_leaves_it_out(capsys):
    c = released()
    with_tower = plan_memory(c, 200 * 10 ** 9)
    text = plan_memory(c.replace(vision=None), 200 * 10 ** 9)
    weights, acts = vision_weight_bytes(c, None), vision_activation_bytes(c)
    assert weights == 894_717_952 and acts > 3 * 10 ** 9                # 66k patches at the tower's widths, fp32
    assert with_tower.vision_bytes == weights + acts and text.vision_bytes == 0
    assert with_tower.resident_bytes <= with_tower.budget
    assert with_tower.expert_slots < text.expert_slots                 # the tower's room comes out of the experts'
    assert main(["plan", "k3", "--memory-budget", "200GB", "--disk-bandwidth", "3GB", "--memory-bandwidth", "20GB"]) == 0
    assert "vision tower 4.98 GB" in capsys.readouterr().out


@pytest.mark.parametrize("flag,value", [("--limit-mm-per-prompt", "{\"video\": 1}"), ("--limit-mm-per-prompt", "4")])
def test_serve_refuses_bad_image_limits_before_loading(flag, value, capsys):
    assert main(["serve", "--port", "0", flag, value]) == 2
    assert "--limit-mm-per-prompt" in capsys.readouterr().err


def test_a_tiny_vision_model_for_everyone_and_image_arguments_checked_before_loading(tmp_path, capsys, monkeypatch):
    """`k3 synth --preset tiny-vision` makes an image-capable checkpoint in seconds; a text-only model, an image
    that is not one, or --no-vision is refused before any model loads."""
    out = tmp_path / "tiny-vision"
    assert main(["synth", str(out), "--preset", "tiny-vision"]) == 0
    picture, junk = tmp_path / "p.png", tmp_path / "junk.png"
    picture.write_bytes(encoded(size=(640, 480), noise=5))
    junk.write_bytes(b"not an image")
    argv = ["generate", "--max-tokens", "2", "--cache-memory", "64MiB", "--prompt", "What?"]
    assert main([*argv, "--model", str(out), "--image", str(picture)]) == 0
    capsys.readouterr()
    import k3.engine

    monkeypatch.setattr(k3.engine, "LLM", lambda *a, **k: pytest.fail("a model loaded before the check"))
    for extra, message in ((["--model", "default", "--image", str(picture)], "takes text only here (its checkpoint"),
                           (["--model", str(out), "--image", str(picture), "--no-vision"], "--no-vision was given"),
                           (["--model", str(out), "--image", str(junk)], "corrupt, truncated or not an image")):
        assert main([*argv, *extra]) == 2
        assert message in capsys.readouterr().err
