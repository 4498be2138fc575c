"""Start-up: a large synthetic split is drawn once per machine and kept in the data folder (training/data.py
``synthetic``); every later rank and run reads it. Drawing 50,000 CIFAR-shaped images took ~46 s of one core here,
reading them back ~1 s. The threshold is lowered so the test draws 64 images."""

from __future__ import annotations

import pytest
from support.lazy import lazy

torch = lazy("torch")  # at its first use, never at collection (support/lazy.py)
data = lazy("training.data")


def test_a_large_synthetic_split_is_drawn_once_and_read_back_identical(tmp_path, monkeypatch):
    monkeypatch.setattr(data.module, "SYNTHETIC_CACHE_MIN", 64)
    first = data.synthetic("synthetic-cifar10", 64, 3, "train", str(tmp_path))
    [kept] = (tmp_path / "synthetic").glob("synthetic-cifar10-train-64-seed3-*.pt")

    def drawn_again(*args: object) -> None:
        raise AssertionError("the kept split was drawn again")

    monkeypatch.setattr(data.module, "make_synthetic", drawn_again)
    again = data.synthetic("synthetic-cifar10", 64, 3, "train", str(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(first.tensors, again.tensors, strict=True))
    assert kept.stat().st_size > 64 * 3 * 32 * 32 * 4
    with pytest.raises(AssertionError, match="drawn again"):  # another seed is another file
        data.synthetic("synthetic-cifar10", 64, 4, "train", str(tmp_path))


def test_a_small_split_is_drawn_each_time_and_nothing_is_written(tmp_path):
    small = data.synthetic("synthetic", 32, 0, "val", str(tmp_path))
    assert torch.equal(small.tensors[0], data.make_synthetic(32, 0, "val").tensors[0])
    assert not (tmp_path / "synthetic").exists()
