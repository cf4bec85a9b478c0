"""Checks for the logic chapters 9-11 rely on (the reproductions part of the book)."""
from __future__ import annotations

import pytest
import torch

from calib import data as cdata


def test_gaussian_overlap_is_a_named_offline_dataset() -> None:
    assert "gaussian_overlap" in cdata.datasets()
    s = cdata.load("gaussian_overlap", split_seed=3)
    assert s.train_x.shape == (540, 20) and s.val_x.shape == (500, 20) and s.test_x.shape == (1000, 20)
    assert s.num_classes == 5 and not s.image
    assert torch.bincount(s.train_y, minlength=5).tolist() == [108] * 5
    again = cdata.load("gaussian_overlap", split_seed=3)
    assert torch.equal(s.train_x, again.train_x) and torch.equal(s.test_y, again.test_y)
    other = cdata.load("gaussian_overlap", split_seed=4)
    assert not torch.equal(s.train_x, other.train_x)


def test_gaussian_overlap_classes_overlap() -> None:
    """The Bayes classifier errs on a sizeable share of test points (that is the point of it)."""
    s = cdata.load("gaussian_overlap")
    bayes_error = float((s.extra["test_eta"].argmax(1) != s.test_y).double().mean())
    assert 0.05 < bayes_error < 0.5


def test_gaussian_overlap_refuses_val_size() -> None:
    with pytest.raises(ValueError, match="val_size"):
        cdata.load("gaussian_overlap", val_size=10)
