import pytest

from k3.chat import K3Tokenizer
from k3.testing.tokenizer import write_tokenizer


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="session")
def tok(tokenizer_dir):
    return K3Tokenizer.load(tokenizer_dir)
