"""k3 verify reports each kind of damage precisely (kind, file, tensor); the loader refuses the same files."""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest
import torch

import k3
from k3.testing.checkpoint import rewrite_shard
from k3.checkpoint import CheckpointError, CheckpointReader
from k3.checkpoint.header import read_header
from k3.checkpoint.reader import INDEX_FILE
from k3.cli.main import main
from k3.tools.verify import verify_checkpoint

NORM = "language_model.model.norm.weight"
SCALE = "language_model.model.layers.1.block_sparse_moe.experts.2.w3.weight_scale"


@pytest.fixture
def ckpt(tiny_copy):
    return tiny_copy


def only_problem(d, **kw):
    report = verify_checkpoint(d, **kw)
    assert len(report.problems) == 1, report.problems
    return report.problems[0]


def test_intact_checkpoint_verifies(ckpt):
    report = verify_checkpoint(ckpt)
    assert report.ok and report.files >= 2 and report.tensors > 100


def test_truncated_shard(ckpt):
    shard = sorted(ckpt.glob("*.safetensors"))[1]
    os.truncate(shard, shard.stat().st_size - 100)
    p = only_problem(ckpt)
    assert (p.kind, p.file) == ("shard", shard.name) and "truncated" in p.message


def test_flipped_byte_is_caught_by_the_manifest(ckpt, tmp_path, capsys):
    manifest = tmp_path / "m.json"
    assert main(["verify", str(ckpt), "--write-manifest", str(manifest)]) == 0
    assert main(["verify", str(ckpt), "--manifest", str(manifest)]) == 0
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    data = bytearray(shard.read_bytes())
    data[-5] ^= 0x01  # inside tensor data: structurally still valid
    shard.write_bytes(bytes(data))
    assert verify_checkpoint(ckpt).ok  # only the checksum can see it
    p = only_problem(ckpt, manifest=manifest)
    assert (p.kind, p.file) == ("sha256", shard.name)
    capsys.readouterr()
    assert main(["verify", str(ckpt), "--manifest", str(manifest)]) == 1
    assert "[sha256]" in capsys.readouterr().out


def test_wrong_shape(ckpt):
    shard = rewrite_shard(ckpt, NORM, lambda t: t.__setitem__(NORM, torch.ones(7, dtype=torch.bfloat16)))
    p = only_problem(ckpt)
    assert (p.kind, p.file, p.tensor) == ("shape", shard, NORM)


def test_missing_and_unexpected_tensors(ckpt):
    extra = "language_model.model.layers.0.self_attn.bogus.weight"

    def change(t):
        t[extra] = t.pop(NORM)

    rewrite_shard(ckpt, NORM, change)
    kinds = {(p.kind, p.tensor) for p in verify_checkpoint(ckpt).problems}
    assert kinds == {("missing-tensor", NORM), ("unexpected-tensor", extra)}


def test_hostile_header_length(ckpt):
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    data = bytearray(shard.read_bytes())
    data[:8] = struct.pack("<Q", 2 ** 40)
    shard.write_bytes(bytes(data))
    p = only_problem(ckpt)
    assert p.file == shard.name and "over the" in p.message and "limit" in p.message
    with pytest.raises(CheckpointError, match="limit"):
        k3.load(ckpt)


def test_overlapping_tensor_data_is_refused(ckpt):
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    by_size = {}
    for k, v in header.items():
        if k != "__metadata__":
            by_size.setdefault(v["data_offsets"][1] - v["data_offsets"][0], []).append(k)
    a, b = next(names for names in by_size.values() if len(names) >= 2)[:2]
    header[b]["data_offsets"] = header[a]["data_offsets"]  # two tensors alias the same bytes
    shard.write_bytes(raw[:8] + json.dumps(header, separators=(",", ":")).encode().ljust(n) + raw[8 + n:])
    problems = verify_checkpoint(ckpt).problems
    assert problems[0].kind == "shard" and problems[0].file == shard.name
    assert "overlaps" in problems[0].message or "gap" in problems[0].message


def test_index_escaping_the_directory(ckpt):
    index = json.loads((ckpt / INDEX_FILE).read_text())
    index["weight_map"][NORM] = "../../etc/passwd"
    (ckpt / INDEX_FILE).write_text(json.dumps(index))
    p = only_problem(ckpt)
    assert p.kind == "index" and "outside the checkpoint directory" in p.message
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        CheckpointReader(ckpt)


def test_symlink_out_of_the_directory_is_refused(ckpt, tmp_path):
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    outside = tmp_path / "elsewhere.safetensors"
    shutil.move(shard, outside)
    shard.symlink_to(outside)
    p = only_problem(ckpt)
    assert p.file == shard.name and "symlink" in p.message
    with pytest.raises(CheckpointError, match="symlink"):
        CheckpointReader(ckpt)


def test_nan_scale_byte(ckpt):
    file, offset, _ = CheckpointReader(ckpt).data_range(SCALE.removeprefix("language_model."))
    with open(ckpt / file, "r+b") as f:
        f.seek(offset + 3)
        f.write(b"\xff")
    p = only_problem(ckpt)
    assert (p.kind, p.file, p.tensor) == ("mxfp4-scale", file, SCALE)


def test_missing_shard(ckpt):
    shard = sorted(ckpt.glob("*.safetensors"))[1]
    shard.unlink()
    p = only_problem(ckpt)
    assert (p.kind, p.file) == ("missing-file", shard.name)


def test_scan_reports_nan_and_inf_by_tensor(ckpt, capsys):
    assert verify_checkpoint(ckpt, scan=True).ok
    file, offset, _ = CheckpointReader(ckpt).data_range(NORM.removeprefix("language_model."))
    dtype = read_header(ckpt / file).entries[NORM].dtype
    nan, inf = (b"\xc0\x7f", b"\x80\x7f") if dtype == "BF16" else (b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f")
    with open(ckpt / file, "r+b") as f:
        f.seek(offset)
        f.write(nan + inf + inf)
    assert verify_checkpoint(ckpt).ok                       # without --scan nothing reads the values
    p = only_problem(ckpt, scan=True)
    assert (p.kind, p.file, p.tensor) == ("non-finite", file, NORM)
    assert p.message.startswith("1 NaN and 2 Inf"), p.message
    assert main(["verify", str(ckpt), "--scan"]) == 1
    assert "non-finite" in capsys.readouterr().out


def test_deeply_nested_header_is_a_checkpoint_error(ckpt):
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    header = b"[" * 100_000 + b"]" * 100_000
    shard.write_bytes(struct.pack("<Q", len(header)) + header)
    p = only_problem(ckpt)
    assert p.kind == "shard" and "nested too deeply" in p.message
    with pytest.raises(CheckpointError, match="nested too deeply"):
        k3.load(ckpt)


@pytest.mark.parametrize("key,value,says", [
    ("num_hidden_layers", 10 ** 12, "outside 1..1,024"),
    ("num_hidden_layers", 1e12, "expected an integer"),
    ("vocab_size", -5, "outside"),
    ("vocab_size", "163840", "expected an integer"),
    ("num_experts", 0.5, "expected an integer"),
    ("num_attention_heads", 10 ** 9, "outside"),
    ("hidden_size", True, "expected an integer"),
])
def test_absurd_config_sizes_are_refused_before_anything_is_built(ckpt, key, value, says, capsys):
    path = ckpt / "config.json"
    raw = json.loads(path.read_text())
    raw.get("text_config", raw)[key] = value
    path.write_text(json.dumps(raw))
    report = verify_checkpoint(ckpt)
    assert [p.kind for p in report.problems] == ["config"] and says in report.problems[0].message
    assert main(["inspect", str(ckpt)]) != 0
    assert key in capsys.readouterr().err


def test_layout_too_large_to_list_is_refused(ckpt):
    path = ckpt / "config.json"
    raw = json.loads(path.read_text())
    text = raw.get("text_config", raw)
    text.update(num_hidden_layers=1000, num_experts=60000, first_k_dense_replace=0)
    text.pop("linear_attn_config", None)
    path.write_text(json.dumps(raw))
    report = verify_checkpoint(ckpt)
    assert [p.kind for p in report.problems] == ["config"] and "tensors" in report.problems[0].message


def test_inspect_says_a_checkpoint_with_a_shard_missing_is_incomplete(ckpt, capsys):
    """Issue 42: `k3 inspect` exited 0 without a word; it still shows what the config describes."""
    shard = sorted(ckpt.glob("*.safetensors"))[1]
    shard.unlink()
    assert main(["inspect", str(ckpt)]) == 1
    out, err = capsys.readouterr()
    assert "incomplete" in err and shard.name in err and out.strip()
    assert main(["inspect", str(ckpt), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["missing_shards"] == [shard.name]


def test_many_repeated_findings_are_summarised(ckpt, capsys):
    """Issue 42: 300k bad tensors printed 600k lines. Many unexpected tensors: a screenful, and counts."""
    from safetensors.torch import save_file

    extra = {f"language_model.model.junk.{i}": torch.zeros(0) for i in range(3000)}
    save_file(extra, str(ckpt / "junk.safetensors"))
    index = json.loads((ckpt / INDEX_FILE).read_text())
    index["weight_map"] |= {name: "junk.safetensors" for name in extra}
    (ckpt / INDEX_FILE).write_text(json.dumps(index))
    assert main(["verify", str(ckpt), "--no-hash"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert 3 < len(lines) < 100 and any("more [" in line for line in lines), lines[:20]
    assert main(["verify", str(ckpt), "--no-hash", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["problems_total"] >= 3000 and len(report["problems"]) <= 1000 and report["problems_by_kind"]


def _rewrite_header_text(shard, edit) -> None:
    """Replace the header by edit(its JSON text), padded as safetensors pads it; the data stays."""
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    text = edit(raw[8:8 + n].decode().rstrip()).encode()
    text += b" " * (-len(text) % 8)
    shard.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def _first_entry(text: str) -> tuple[str, dict]:
    header = json.loads(text)
    name = next(k for k in header if k != "__metadata__")
    return name, header[name]


HOSTILE = {   # edits of a header's JSON text that k3.load refuses
    "duplicated key, same entry": lambda t: t[:-1] + ", " + json.dumps(dict([_first_entry(t)]))[1:-1] + "}",
    "duplicated key, other entry": lambda t: t[:-1] + ", " + json.dumps(
        {_first_entry(t)[0]: dict(_first_entry(t)[1], data_offsets=[0, 0], shape=[0])})[1:-1] + "}",
    "duplicated field in an entry": lambda t: t.replace('"dtype":', '"dtype": "F32", "dtype":', 1),
    "boolean in a shape": lambda t: t.replace('"shape": [', '"shape": [true, ', 1).replace('"shape":[', '"shape":[true,', 1),
    "offsets as text": lambda t: t.replace('"data_offsets": [', '"data_offsets": ["0", ', 1)
                                  .replace('"data_offsets":[', '"data_offsets":["0",', 1),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_verify_refuses_every_header_load_refuses(ckpt, case):
    """Issue 69: one header check for both. A duplicated key passed `k3 verify`."""
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    _rewrite_header_text(shard, HOSTILE[case])
    with pytest.raises(CheckpointError) as refused:
        k3.load(ckpt)
    problems = [p for p in verify_checkpoint(ckpt).problems if p.kind == "shard"]
    assert problems and problems[0].file == shard.name and problems[0].message in str(refused.value)
    if case.startswith("duplicated"):
        assert "twice" in problems[0].message

