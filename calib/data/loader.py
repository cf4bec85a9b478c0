"""A loader that keeps a whole split on the device and augments a batch at once.

The CIFAR protocol of Mukhoti et al. 2020, §5 / Lin et al. 2024, §5 trains with a random 32×32 crop of the image padded
by 4 zero pixels on each side and a horizontal flip with probability 1/2. A
``torch.utils.data.DataLoader`` does this per image in Python (PIL) worker processes;
here the split lives on the device as ``uint8`` and one batch is cropped, flipped and
normalised by a few tensor operations:

* crop + flip: pad the batch once, then one ``gather`` with per-sample source indices
  ``row = oy + i`` and ``col = ox + j`` (``col = ox + W - 1 - j`` for flipped samples);
* normalisation: ``(x / 255 - mean) / std`` as one fused multiply-add in float32.

All randomness of an epoch (permutation, offsets, flips) is drawn at the start of the
epoch from a CPU ``torch.Generator`` seeded by ``(seed, epoch)``, so the batch order
depends only on ``(seed, epoch)``; :meth:`DeviceLoader.state_dict` stores the epoch and
the position inside it, and a loader restored from it yields exactly the batches the
original would have yielded next. Starting a new ``for`` loop after abandoning one
mid-epoch (``break``) starts the next epoch; only :meth:`DeviceLoader.load_state_dict`
resumes inside an epoch.
"""
from __future__ import annotations

import math
from typing import Any, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .._checks import as_tensor, check_finite, check_positive_int

__all__ = ["DeviceLoader", "random_crop_flip"]

Tensor = torch.Tensor


def random_crop_flip(x: Tensor, oy: Tensor, ox: Tensor, flip: Tensor, padding: int = 4) -> Tensor:
    """Crop every image of ``x`` (B, C, H, W) at its own offset and flip some horizontally.

    Image ``b`` is zero-padded by ``padding`` pixels on each side and cropped back to
    ``H × W`` starting at row ``oy[b]`` and column ``ox[b]`` (both in ``[0, 2·padding]``);
    where ``flip[b]`` the crop is mirrored left-right. Equivalent to torchvision's
    ``RandomCrop(H, padding)`` followed by ``RandomHorizontalFlip`` with these draws, done
    for the whole batch by one ``gather``. Works for any dtype (uint8 saves bandwidth).
    """
    if x.ndim != 4:
        raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
    b, c, h, w = x.shape
    for nm, t in (("oy", oy), ("ox", ox), ("flip", flip)):
        if t.shape != (b,):
            raise ValueError(f"{nm} must have shape ({b},), got {tuple(t.shape)}")
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    padded = F.pad(x, (padding, padding, padding, padding)) if padding else x
    wp = w + 2 * padding
    i = torch.arange(h, device=x.device).view(h, 1)
    j = torch.arange(w, device=x.device).view(1, w)
    grid = (i * wp + j).view(1, h * w)                  # source of pixel (i, j) at offset (0, 0)
    mirrored = (i * wp + (w - 1 - j)).view(1, h * w)    # the same, flipped left-right
    start = (oy.to(x.device).long() * wp + ox.to(x.device).long()).view(b, 1)
    flat = start + torch.where(flip.to(x.device).bool().view(b, 1), mirrored, grid)  # (B, H*W)
    out = padded.reshape(b, c, -1).gather(2, flat.view(b, 1, h * w).expand(b, c, h * w))
    return out.view(b, c, h, w)


def _epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit seed for epoch ``epoch`` that does not collide across (seed, epoch) pairs."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)[0] >> 1)


class DeviceLoader:
    """Iterate over ``(x, y)`` batches of a split held entirely on ``device``.

    Parameters
    ----------
    x
        ``uint8`` images ``(N, C, H, W)`` (scaled by 1/255 on the way out), float images
        ``(N, C, H, W)`` or float features ``(N, D)`` (used as they are).
    y
        Integer labels ``(N,)``.
    batch_size
        Examples per batch; ``len(loader)`` is the number of batches per epoch.
    shuffle
        Draw a fresh permutation each epoch (``torch.randperm`` with the loader's generator).
    augment
        Random crop with ``padding`` zero pixels and horizontal flip (images only).
    mean, std
        Per-channel (images) or per-feature (vectors) statistics; outputs are
        ``(x - mean) / std``. ``None`` or ``()`` (as in a non-image :class:`Splits`)
        leaves the scale as it is.
    device
        Where the data lives and batches are made; default :func:`calib.profile.device`.
    seed
        Seeds every epoch's randomness together with the epoch number.
    drop_last
        Drop the last incomplete batch.
    channels_last
        Return image batches in ``torch.channels_last`` memory format.
    rank, world_size
        For data-parallel training: every process draws the same permutation and keeps
        the positions ``rank, rank + world_size, ...`` of it, after trimming it to a
        multiple of ``world_size`` so all processes see the same number of batches.
    """

    def __init__(
        self,
        x: Any,
        y: Any,
        batch_size: int,
        *,
        shuffle: bool = True,
        augment: bool = False,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        device: torch.device | str | None = None,
        seed: int = 0,
        drop_last: bool = False,
        channels_last: bool = False,
        padding: int = 4,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        from ..profile import device as default_device

        self.device = torch.device(device) if device is not None else default_device()
        self._x = self._check_x(x).to(self.device)
        self._y = self._check_y(y, self._x.shape[0]).to(self.device)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.padding = check_positive_int(padding, "padding", minimum=0)
        self.world_size = check_positive_int(world_size, "world_size")
        self.rank = check_positive_int(rank, "rank", minimum=0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be < world_size = {self.world_size}, got {rank}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.seed = int(seed)
        self.shuffle, self.drop_last, self.channels_last = bool(shuffle), bool(drop_last), bool(channels_last)
        self.is_image = self._x.ndim == 4
        if augment and not self.is_image:
            raise ValueError("augment=True needs images (N, C, H, W); got feature vectors (N, D)")
        if channels_last and not self.is_image:
            raise ValueError("channels_last=True needs images (N, C, H, W)")
        self.augment = bool(augment)
        self._scale, self._neg_shift = self._affine(mean, std)
        self._epoch, self._pos, self._resume = 0, 0, False

    # ------------------------------------------------------------------ validation
    @staticmethod
    def _check_x(x: Any) -> Tensor:
        t = as_tensor(x, "x")
        if t.ndim not in (2, 4):
            raise ValueError(f"x must be images (N, C, H, W) or features (N, D), got shape {tuple(t.shape)}")
        if t.shape[0] == 0:
            raise ValueError("x is empty (N = 0)")
        if t.dtype != torch.uint8 and not t.is_floating_point():
            raise TypeError(f"x must be uint8 images or floating point, got dtype {t.dtype}")
        check_finite(t, "x")
        return t

    @staticmethod
    def _check_y(y: Any, n: int) -> Tensor:
        t = as_tensor(y, "y")
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"y must be integer class labels, got dtype {t.dtype}")
        if t.shape != (n,):
            raise ValueError(f"y must have shape ({n},) to match x, got {tuple(t.shape)}")
        if int(t.min()) < 0:
            raise ValueError(f"y must be non-negative class indices, got minimum {int(t.min())}")
        return t.long()

    def _affine(self, mean: Sequence[float] | None, std: Sequence[float] | None) -> tuple[Tensor, Tensor]:
        """``scale`` and ``neg_shift`` with ``x * scale + neg_shift = (x / base - mean) / std``.

        ``base`` is 255 for uint8 images and 1 for float inputs.
        """
        width = self._x.shape[1]
        base = 255.0 if self._x.dtype == torch.uint8 else 1.0
        none = lambda v: v is None or (isinstance(v, (tuple, list)) and len(v) == 0)  # noqa: E731
        m = torch.zeros(width, dtype=torch.float64) if none(mean) else self._stat(mean, "mean", width)
        s = torch.ones(width, dtype=torch.float64) if none(std) else self._stat(std, "std", width)
        if bool((s <= 0).any()):
            raise ValueError(f"std must be > 0, got {s.tolist()}")
        shape = (1, width, 1, 1) if self.is_image else (1, width)
        scale, neg_shift = 1.0 / (base * s), -m / s
        return scale.float().view(shape).to(self.device), neg_shift.float().view(shape).to(self.device)

    @staticmethod
    def _stat(v: Sequence[float], name: str, width: int) -> Tensor:
        t = as_tensor(v, name, dtype=torch.float64).reshape(-1)
        if t.numel() != width:
            raise ValueError(f"{name} must have {width} entries (one per channel/feature), got {t.numel()}")
        check_finite(t, name)
        return t

    # ------------------------------------------------------------------ sizes
    @property
    def num_samples(self) -> int:
        """Examples this process visits per epoch (after sharding for ``world_size``)."""
        n = self._x.shape[0]
        return n if self.world_size == 1 else n // self.world_size

    def __len__(self) -> int:
        n = self.num_samples
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    @property
    def epoch(self) -> int:
        """Epochs completed (the index of the epoch the next iteration runs)."""
        return self._epoch

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, int]:
        """Epoch counter, position inside the epoch and seed; enough to resume exactly."""
        return {"epoch": self._epoch, "position": self._pos, "seed": self.seed,
                "batch_size": self.batch_size, "num_samples": self.num_samples}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore :meth:`state_dict`; the next iteration continues where that one stopped."""
        for key in ("epoch", "position", "seed"):
            if key not in state:
                raise ValueError(f"loader state lacks {key!r}; got keys {sorted(state)}")
        for key in ("batch_size", "num_samples"):
            if key in state and int(state[key]) != getattr(self, key):
                raise ValueError(f"loader state has {key}={state[key]} but this loader has {getattr(self, key)}")
        if not 0 <= int(state["position"]) <= len(self):
            raise ValueError(f"loader state position {state['position']} is outside [0, {len(self)}]")
        self.seed, self._epoch, self._pos = int(state["seed"]), int(state["epoch"]), int(state["position"])
        self._resume = self._pos > 0

    # ------------------------------------------------------------------ iteration
    def _draws(self, epoch: int) -> tuple[Tensor, Tensor | None]:
        """This process's order of indices and the (B, 3) crop/flip draws for the epoch."""
        n = self._x.shape[0]
        g = torch.Generator().manual_seed(_epoch_seed(self.seed, epoch))
        order = torch.randperm(n, generator=g) if self.shuffle else torch.arange(n)
        aug = None
        if self.augment:
            offsets = torch.randint(0, 2 * self.padding + 1, (n, 2), generator=g)
            flips = torch.randint(0, 2, (n, 1), generator=g)
            aug = torch.cat([offsets, flips], 1)
        if self.world_size > 1:
            keep = torch.arange(self.rank, n - n % self.world_size, self.world_size)
            order = order[keep]
            aug = aug[keep] if aug is not None else None
        return order.to(self.device), (aug.to(self.device) if aug is not None else None)

    def _batch(self, idx: Tensor, aug: Tensor | None) -> tuple[Tensor, Tensor]:
        x = self._x.index_select(0, idx)
        if aug is not None:
            x = random_crop_flip(x, aug[:, 0], aug[:, 1], aug[:, 2].bool(), self.padding)
        x = x.float().mul_(self._scale).add_(self._neg_shift)  # x is a fresh copy (index_select)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, self._y.index_select(0, idx)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        if not self._resume and self._pos > 0:  # an earlier iteration was abandoned mid-epoch
            self._epoch, self._pos = self._epoch + 1, 0
        self._resume = False
        order, aug = self._draws(self._epoch)
        bs, nb = self.batch_size, len(self)
        while self._pos < nb:
            sl = slice(self._pos * bs, (self._pos + 1) * bs)
            batch = self._batch(order[sl], aug[sl] if aug is not None else None)
            self._pos += 1
            yield batch
        self._epoch, self._pos = self._epoch + 1, 0

    def __repr__(self) -> str:
        return (f"DeviceLoader(N={self._x.shape[0]}, batch_size={self.batch_size}, batches={len(self)}, "
                f"augment={self.augment}, shuffle={self.shuffle}, device={self.device}, epoch={self._epoch})")
