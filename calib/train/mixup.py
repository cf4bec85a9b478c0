"""Mixup training (Zhang et al. 2018), the "Mixup (α = 1.0)" row of Wang & Golebiowski (2024).

A batch ``(x, y)`` is mixed with a shuffled copy of itself::

    λ ~ Beta(α, α),   π a random permutation of the batch,
    x̃ = λ·x + (1 − λ)·x[π],
    L = λ·ℓ(f(x̃), y) + (1 − λ)·ℓ(f(x̃), y[π]).

For cross-entropy ``L`` equals the CE against the mixed one-hot target
``λ·e_y + (1 − λ)·e_{y[π]}``; Thulasidasan et al. (2019) show that such training also
calibrates. α = 1 draws λ uniformly. ``α = 0`` means no mixing (λ = 1).

Randomness comes from a seed (:func:`mix_batch`), so a batch's mix is a pure function of
(batch, α, seed); the trainer draws that seed from torch's global generator, whose state
its checkpoints save, so an interrupted run resumes with the same mixes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import Tensor

__all__ = ["MixedBatch", "check_alpha", "sample_lambda", "mix_batch", "mixup_loss", "draw_seed"]


def check_alpha(alpha: float, name: str = "alpha") -> float:
    """``alpha`` as a float ≥ 0 (the Beta(α, α) parameter), or a ValueError/TypeError naming it."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"{name} must be a number >= 0, got {alpha!r}")
    if not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"{name} must be a finite number >= 0 (0 turns mixup off), got {alpha}")
    return float(alpha)


def sample_lambda(alpha: float, rng: np.random.Generator) -> float:
    """One draw of λ ~ Beta(α, α); 1.0 when α = 0 (no mixing)."""
    alpha = check_alpha(alpha)
    return 1.0 if alpha == 0 else float(rng.beta(alpha, alpha))


@dataclass(frozen=True)
class MixedBatch:
    """A mixed batch: inputs ``x``, the two label sets ``y_a`` (= y) and ``y_b`` (= y[π]), λ."""

    x: Tensor
    y_a: Tensor
    y_b: Tensor
    lam: float
    perm: Tensor

    def loss(self, criterion: Callable[[Tensor, Tensor], Tensor], logits: Tensor) -> Tensor:
        """:func:`mixup_loss` of ``logits`` (computed on :attr:`x`) with this batch's labels and λ."""
        return mixup_loss(criterion, logits, self.y_a, self.y_b, self.lam)


def mix_batch(x: Tensor, y: Tensor, alpha: float, *, seed: int) -> MixedBatch:
    """Mix a batch with a permutation of itself: ``x̃ = λ·x + (1 − λ)·x[π]`` (Zhang et al. 2018).

    λ ~ Beta(α, α) and π come from ``numpy.random.default_rng(seed)``: the same
    ``(x, y, alpha, seed)`` always gives the same mix. The permutation is applied on
    ``x``'s device; ``x`` must be a floating tensor with a leading batch dimension.
    """
    if not isinstance(x, Tensor) or not isinstance(y, Tensor):
        raise TypeError(f"x and y must be torch tensors, got {type(x).__name__} and {type(y).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating tensor to be mixed, got dtype {x.dtype}")
    if x.ndim < 1 or x.shape[0] == 0 or y.shape[:1] != x.shape[:1]:
        raise ValueError(f"x and y must share a non-empty batch dimension, got {tuple(x.shape)} and {tuple(y.shape)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}")
    rng = np.random.default_rng(int(seed))
    lam = sample_lambda(alpha, rng)
    perm = torch.from_numpy(rng.permutation(x.shape[0])).to(x.device)
    mixed = x if lam == 1.0 else lam * x + (1 - lam) * x[perm]
    return MixedBatch(mixed, y, y[perm.to(y.device)], lam, perm)


def mixup_loss(
    criterion: Callable[[Tensor, Tensor], Tensor], logits: Tensor, y_a: Tensor, y_b: Tensor, lam: float
) -> Tensor:
    """``λ·criterion(logits, y_a) + (1 − λ)·criterion(logits, y_b)`` (Zhang et al. 2018).

    ``criterion`` is any calib loss (module or function) returning the batch mean; a
    per-sample result is averaged first.
    """
    if not 0.0 <= float(lam) <= 1.0:
        raise ValueError(f"lam must lie in [0, 1], got {lam}")

    def mean(value: Tensor) -> Tensor:
        return value.mean() if value.ndim else value

    if lam == 1.0:
        return mean(criterion(logits, y_a))
    return lam * mean(criterion(logits, y_a)) + (1 - lam) * mean(criterion(logits, y_b))


def draw_seed() -> int:
    """A seed for :func:`mix_batch` drawn from torch's global CPU generator (checkpointed by the trainer)."""
    return int(torch.randint(0, 2**62, (1,)).item())
