"""The container every dataset loader returns, and the smoke-mode cap on its size.

Kept apart from :mod:`calib.data.vision` and :mod:`calib.data.toy` so that both import it
and neither imports the other.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from .. import profile as _profile

__all__ = ["Splits", "smoke_subset"]

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
        text = f"Splits(name={self.name!r}, num_classes={self.num_classes}, {shapes}, image={self.image})"
        return text if len(text) <= 80 else text.replace(", train=", ",\n       train=").replace(", test=", ",\n       test=")


def smoke_subset(splits: Splits) -> Splits:
    """``splits`` cut to the smoke-mode sizes when ``CALIB_SMOKE=1``, else ``splits`` itself.

    The first :data:`calib.profile.SMOKE_CAPS` ``["train"]`` training and ``["eval"]``
    validation and test examples are kept (the splits are already random draws), so a
    chapter's ``colab``/``paper`` branch runs its real code path in seconds on a CPU.
    Per-split tensors in ``extra`` (``train_eta``, ``val_*``, ``test_*``) are cut alike.
    """
    if not _profile.smoke():
        return splits
    caps = {"train": _profile.SMOKE_CAPS["train"], "val": _profile.SMOKE_CAPS["eval"],
            "test": _profile.SMOKE_CAPS["eval"]}
    if all(getattr(splits, f"{s}_x").shape[0] <= n for s, n in caps.items()):
        return splits
    cut = {f"{s}_{xy}": getattr(splits, f"{s}_{xy}")[:n] for s, n in caps.items() for xy in "xy"}
    extra = {k: (v[:caps[k.split("_")[0]]] if k.split("_")[0] in caps else v) for k, v in splits.extra.items()}
    return replace(splits, **cut, extra=extra)
