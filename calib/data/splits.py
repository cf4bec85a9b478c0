"""The container every loader returns: train / validation / test tensors of one dataset.

It lives in its own module so that the toy data (:mod:`calib.data.toy`) and the image
datasets (:mod:`calib.data.vision`) both build it without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["Splits"]

Tensor = torch.Tensor


@dataclass(repr=False)
class Splits:
    """Train / validation / test tensors of one dataset.

    Images (``image=True``) are ``uint8`` tensors ``(N, C, H, W)`` with ``mean``/``std`` the
    per-channel statistics in [0, 1] used to normalise them; non-image toy data
    (``image=False``) is ``float32`` ``(N, D)`` and gets no augmentation or normalisation
    (``mean``/``std`` are then empty tuples). Labels are ``int64`` in ``[0, num_classes)``.
    ``extra`` holds dataset-specific tensors, e.g. the true posterior ``test_eta`` of the
    Gaussian mixture.
    """

    train_x: Tensor
    train_y: Tensor
    val_x: Tensor
    val_y: Tensor
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    name: str
    image: bool
    extra: dict[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split in ("train", "val", "test"):
            x, y = getattr(self, f"{split}_x"), getattr(self, f"{split}_y")
            if x.shape[0] != y.shape[0]:
                raise ValueError(f"{split}_x has {x.shape[0]} rows but {split}_y has {y.shape[0]}")
            if y.dtype != torch.int64:
                raise TypeError(f"{split}_y must be int64 labels, got {y.dtype}")

    def __repr__(self) -> str:
        shapes = ", ".join(
            f"{s}={tuple(getattr(self, s + '_x').shape)}" for s in ("train", "val", "test")
        )
        return f"Splits(name={self.name!r}, num_classes={self.num_classes}, {shapes}, image={self.image})"
