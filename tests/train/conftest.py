import pytest

from k3.testing.tokenizer import SAMPLE_TEXT
from k3.train.prepare import prepare


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    (d / "a.txt").write_text(SAMPLE_TEXT * 30)
    (d / "b.txt").write_text("Call me Ishmael. Some years ago, never mind how long precisely. " * 200)
    prepare([d / "a.txt", d / "b.txt"], d / "prepared", vocab_size=768, val_fraction=0.1)
    return d / "prepared"
