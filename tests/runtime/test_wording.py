"""The words of run-time messages: tensors described by dtype and shape, counts with their noun."""

import torch

from mpcheck.runtime.checks.wording import plural, tensor_words


def test_plural_says_one_or_many():
    assert [plural(n, "crossing") for n in (0, 1, 3)] == ["0 crossings", "1 crossing", "3 crossings"]
    assert plural(2, "copy", "copies") == "2 copies"


def test_a_tensor_is_described_by_dtype_and_shape():
    assert tensor_words(torch.ones(32)) == "a float32 tensor of shape (32,)"
    assert tensor_words(torch.ones(2, 8, dtype=torch.int64)) == "an int64 tensor of shape (2, 8)"
    assert tensor_words(torch.tensor(1.0)) == "a 0-dim float32 tensor"
    assert tensor_words(torch.ones(3, dtype=torch.uint8)) == "a uint8 tensor of shape (3,)"
