"""The tower and projector against the float64 reference, on a tiny random tower in the official layout read
straight from its shards; loading with and without the tower; the config's checks."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.vision_layout import vision_tensors
from k3.config import ConfigError
from k3.config.hf import from_hf_dict
from k3.config.presets import released, released_hf_dict, tiny_chat_vision
from k3.layers.vision_reference import encode_reference
from k3.model.weights import load_model
from k3.testing import make_checkpoint
from k3.testing.checkpoint import rewrite_shard
from k3.testing.tolerance import assert_close

GRIDS = [(1, 6, 10), (1, 20, 18), (1, 2, 2)]       # shrink and enlarge the 8x8 table, and the smallest image


def _shard_weights(ckpt) -> dict:
    """The tower's tensors as the shards hold them, without the loader."""
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())["weight_map"]
    out = {}
    for name, file in index.items():
        if name.startswith(("vision_tower.", "mm_projector.")):
            with safe_open(str(ckpt / file), "pt") as f:
                out[name] = f.get_tensor(name)
    return out


def _pixels(grids, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(sum(t * h * w for t, h, w in grids), 3, 14, 14, generator=g) * 2 - 1


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (None, 1e-5)])
def test_image_rows_match_the_float64_reference(vision_checkpoint, dtype, tol):
    """fp32 compute on fp32 weights, and on the checkpoint's bf16 weights kept as stored (the CPU default)."""
    model = load_model(vision_checkpoint, dtype=dtype)
    pixels = _pixels(GRIDS)
    rows = model.encode_images(pixels, torch.tensor(GRIDS))
    expected = encode_reference(_shard_weights(vision_checkpoint), model.vision, pixels, GRIDS)
    for i, (r, e) in enumerate(zip(rows, expected)):
        assert r.shape == (GRIDS[i][1] // 2 * GRIDS[i][2] // 2, model.config.hidden_size)
        assert_close(f"image {i}", r, e, tol)


def test_a_chunk_of_frames_takes_the_time_rows_and_the_mean_over_frames(vision_checkpoint):
    model = load_model(vision_checkpoint, dtype=torch.float32)
    grids = [(3, 4, 6)]
    pixels = _pixels(grids, seed=1)
    (rows,) = model.encode_images(pixels, torch.tensor(grids))
    (expected,) = encode_reference(_shard_weights(vision_checkpoint), model.vision, pixels, grids)
    assert_close("chunk", rows, expected, 1e-5)
    with pytest.raises(ValueError, match="at most 4"):
        model.encode_images(_pixels([(5, 2, 2)]), torch.tensor([(5, 2, 2)]))


def test_images_together_give_what_each_gives_alone(vision_checkpoint):
    model = load_model(vision_checkpoint, dtype=torch.float32)
    pixels = _pixels(GRIDS, seed=2)
    together = model.encode_images(pixels, torch.tensor(GRIDS))
    start = 0
    for grid, rows in zip(GRIDS, together):
        n = grid[0] * grid[1] * grid[2]
        (alone,) = model.encode_images(pixels[start:start + n], torch.tensor([grid]))
        assert_close("alone", rows, alone, 1e-6)
        start += n


def test_bad_pixel_shapes_are_refused(vision_checkpoint):
    model = load_model(vision_checkpoint, dtype=torch.float32)
    with pytest.raises(ValueError, match="needs \\[60, 3, 14, 14\\]"):
        model.encode_images(torch.zeros(59, 3, 14, 14), torch.tensor([(1, 6, 10)]))
    with pytest.raises(ValueError, match="even h, w"):
        model.encode_images(torch.zeros(15, 3, 14, 14), torch.tensor([(1, 3, 5)]))


def test_vision_false_loads_the_text_model_alone(vision_checkpoint):
    model = load_model(vision_checkpoint, vision=False)
    assert not hasattr(model, "vision_tower") and model.vision is None
    with pytest.raises(ValueError, match="no vision tower"):
        model.encode_images(_pixels([(1, 2, 2)]), torch.tensor([(1, 2, 2)]))
    full = load_model(vision_checkpoint)
    ids = torch.tensor([[5, 6, 7, 8]])
    assert torch.equal(model(ids), full(ids))              # the text path is the same with or without the tower


def test_a_missing_tower_tensor_is_named_with_the_way_out(vision_checkpoint, tmp_path):
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(vision_checkpoint, ckpt)
    rewrite_shard(ckpt, "mm_projector.post_norm.weight", lambda t: t.pop("mm_projector.post_norm.weight"))
    with pytest.raises(CheckpointError, match="mm_projector.post_norm.weight.*--no-vision|--no-vision"):
        load_model(ckpt)
    assert load_model(ckpt, vision=False).vision is None


def test_the_released_tower_has_the_spec_s_168_tensors_and_parameter_counts():
    specs = vision_tensors(released().vision)
    tower = sum(s.params for s in specs if s.name.startswith("vision_tower."))
    projector = sum(s.params for s in specs if s.name.startswith("mm_projector."))
    assert (len(specs), tower, projector) == (168, 401_214_464, 46_144_512)
    assert all(s.dtype == "BF16" for s in specs) and released().vision.head_dim == 128


@pytest.mark.parametrize("key,value", [("norm_type", "layernorm"), ("merge_type", "sd2"), ("linear_bias", True),
                                       ("mm_projector_type", "patchmerger"), ("qkv_hidden_size", 1000),
                                       ("pos_emb_interpolation_mode", "nearest")])
def test_other_vision_variants_are_refused_by_name(key, value):
    raw = released_hf_dict()
    raw["vision_config"][key] = value
    with pytest.raises(ConfigError, match=key):
        from_hf_dict(raw)


def test_config_round_trip_and_an_empty_vision_config_is_text_only():
    c = tiny_chat_vision()
    from k3.config.hf import to_hf_dict

    assert from_hf_dict(to_hf_dict(c)) == c
    assert from_hf_dict(to_hf_dict(c.replace(vision=None))).vision is None


def test_a_text_only_checkpoint_still_ignores_stray_vision_tensors(tmp_path):
    ckpt = make_checkpoint(tmp_path / "t", tiny_chat_vision().replace(vision=None), tokenizer=True)
    assert load_model(ckpt).vision is None


def test_many_images_go_through_the_tower_in_bounded_groups(vision_checkpoint, monkeypatch):
    """However many images a request sends, the tower holds one group's activations at a time: grouped rows
    equal the rows of one pass, and the groups stay under the bound."""
    import k3.model.vision as vision

    model = load_model(vision_checkpoint, dtype=torch.float32)
    pixels = _pixels(GRIDS, seed=4)
    whole = model.encode_images(pixels, torch.tensor(GRIDS))
    seen = []
    forward = model.vision_tower.forward
    monkeypatch.setattr(model.vision_tower, "forward", lambda px, grids: seen.append(px.shape[0]) or forward(px, grids))
    monkeypatch.setattr(vision, "GROUP_PATCHES", 100)
    grouped = model.encode_images(pixels, torch.tensor(GRIDS))
    assert seen == [60, 360, 4]                      # 60 + 360 > 100: the large image alone
    for a, b in zip(grouped, whole):
        assert_close("grouped", a, b, 1e-6)


def test_verify_checks_the_tower_against_the_vision_config(vision_checkpoint, tmp_path):
    import shutil

    from k3.tools.verify import verify_checkpoint

    assert verify_checkpoint(vision_checkpoint).ok
    ckpt = tmp_path / "ckpt"
    shutil.copytree(vision_checkpoint, ckpt)
    name = "vision_tower.encoder.blocks.1.wo.weight"
    rewrite_shard(ckpt, name, lambda t: t.__setitem__(name, torch.ones(3, 3, dtype=torch.bfloat16)))
    (problem,) = verify_checkpoint(ckpt).problems
    assert (problem.kind, problem.tensor) == ("shape", name)
    rewrite_shard(ckpt, name, lambda t: t.pop(name))
    (problem,) = verify_checkpoint(ckpt).problems
    assert (problem.kind, problem.tensor) == ("missing-tensor", name)


def test_the_tower_stays_resident_when_weights_stream(vision_checkpoint):
    from k3.streaming import minimum_budget

    config = tiny_chat_vision()
    budget = minimum_budget(config) + 2 ** 16
    streamed = load_model(vision_checkpoint, memory_budget=budget)
    assert streamed.memory_plan.streams_experts and streamed.memory_plan.vision_bytes > 0
    resident = load_model(vision_checkpoint)
    pixels = _pixels(GRIDS, seed=5)
    for a, b in zip(streamed.encode_images(pixels, torch.tensor(GRIDS)), resident.encode_images(pixels, torch.tensor(GRIDS))):
        assert torch.equal(a, b)
    ids = torch.tensor([[5, 6, 7, 533, 533, 8]])
    grid = torch.tensor([(1, 2, 4)])
    px = _pixels([(1, 2, 4)], seed=6)
    assert torch.equal(streamed(ids, pixel_values=px, grid_thw=grid), resident(ids, pixel_values=px, grid_thw=grid))
