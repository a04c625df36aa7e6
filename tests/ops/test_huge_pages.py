"""Weight memory on 2 MB pages (k3/ops/huge_pages.py) and the loader's use of it: the same values, the
placement only."""

import gc

import pytest
import torch

import k3
from k3.ops import huge_pages


@pytest.fixture
def fresh_availability():
    huge_pages.available.cache_clear()
    yield
    huge_pages.available.cache_clear()


def _on_a_huge_page_boundary(t: torch.Tensor) -> bool:
    return t.data_ptr() % huge_pages.HUGE_PAGE == 0


def test_empty_gives_the_asked_tensor_and_keeps_its_memory_alive():
    t = huge_pages.empty((1536, 1031), torch.bfloat16)   # 3.0 MB: odd rows, more than one huge page
    assert t.shape == (1536, 1031) and t.dtype == torch.bfloat16 and t.is_contiguous() and not t.requires_grad
    assert _on_a_huge_page_boundary(t) == huge_pages.available()
    values = torch.randn(1536, 1031).to(torch.bfloat16)
    t.copy_(values)
    row = t[700]
    del t
    gc.collect()
    assert torch.equal(row, values[700]), "a view keeps the mapping alive"


def test_small_tensors_and_other_devices_take_torch_empty():
    small = huge_pages.empty((3, 5), torch.float32)
    assert small.shape == (3, 5) and small.untyped_storage().nbytes() == 60
    assert huge_pages.copy_of(small) is small


def test_k3_huge_pages_0_turns_it_off(monkeypatch, fresh_availability):
    monkeypatch.setenv("K3_HUGE_PAGES", "0")
    assert not huge_pages.available()
    assert not huge_pages.worth_it(64 << 20)
    t = huge_pages.empty((4 << 20,), torch.uint8)
    assert t.untyped_storage().nbytes() == 4 << 20, "a plain allocation, not a mapping with slack"


def test_thp_never_turns_it_off(monkeypatch, tmp_path, fresh_availability):
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    monkeypatch.setattr(huge_pages, "THP_SETTING", setting)
    assert not huge_pages.available()
    setting.write_text("always [madvise] never\n")
    huge_pages.available.cache_clear()
    assert huge_pages.available() == hasattr(__import__("mmap"), "MADV_HUGEPAGE")


def test_copy_of_is_an_equal_contiguous_copy():
    t = torch.randn(2048, 300)[:, 7:263]   # 2 MB, not contiguous
    c = huge_pages.copy_of(t)
    assert torch.equal(c, t) and c.is_contiguous()
    assert _on_a_huge_page_boundary(c) == huge_pages.available()


def test_the_loader_puts_weights_on_huge_pages_with_the_same_values(tiny_checkpoint, monkeypatch, fresh_availability):
    """With the threshold lowered to 4 KB, the tiny checkpoint's larger weights, expert banks and fused
    matrices go on huge pages: the same state_dict and the same logits as without."""
    monkeypatch.setenv("K3_HUGE_PAGES", "0")
    plain = k3.load(tiny_checkpoint)
    huge_pages.available.cache_clear()
    monkeypatch.delenv("K3_HUGE_PAGES")
    monkeypatch.setattr(huge_pages, "worth_it", lambda nbytes: nbytes >= 4096 and huge_pages.available())
    huge = k3.load(tiny_checkpoint)
    a, b = plain.state_dict(), huge.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name
    if huge_pages.available():
        placed = [n for n, t in b.items() if _on_a_huge_page_boundary(t)]
        assert any("experts" in n for n in placed), "expert banks"
        assert any(n == "lm_head.weight" for n in placed), "tensors read as stored (once views of the shard's map)"
        assert "model.embed_tokens.weight" not in placed, "the embedding table is read by row from its map"
        assert any(n.endswith("q_proj.weight") for n in placed), "fused matrices (their first member)"
    ids = torch.tensor([[3, 17, 40, 9]])
    with torch.inference_mode():
        assert torch.equal(plain(ids), huge(ids))


def test_a_refused_mapping_falls_back_to_plain_memory(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(huge_pages.mmap, "mmap", refuse)
    t = huge_pages.empty((3 << 20,), torch.uint8)
    assert t.shape == (3 << 20,) and t.untyped_storage().nbytes() == 3 << 20


def test_an_fp32_load_converts_onto_huge_pages(tiny_checkpoint, monkeypatch, fresh_availability):
    """dtype=torch.float32 widens every float weight: the converted copies land on huge pages too."""
    monkeypatch.setenv("K3_HUGE_PAGES", "0")
    plain = k3.load(tiny_checkpoint, dtype=torch.float32)
    huge_pages.available.cache_clear()
    monkeypatch.delenv("K3_HUGE_PAGES")
    monkeypatch.setattr(huge_pages, "worth_it", lambda nbytes: nbytes >= 4096 and huge_pages.available())
    huge = k3.load(tiny_checkpoint, dtype=torch.float32)
    a, b = plain.state_dict(), huge.state_dict()
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name
    if huge_pages.available():
        assert _on_a_huge_page_boundary(b["lm_head.weight"]) and b["lm_head.weight"].dtype == torch.float32
