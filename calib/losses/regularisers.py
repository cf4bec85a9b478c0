"""Cross-entropy and its regularisers (label smoothing, logit norm, entropy), and the Brier score."""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import ArrayLike, check_nonnegative
from . import uncertainty as _u
from ._core import IGNORE_INDEX, Reduction, _ce, _check_unit, _check_weight_of, full_precision, per_sample_loss, prepare
from ._fused import label_stats


@full_precision
def cross_entropy(logits: ArrayLike, targets: ArrayLike, reduction: Reduction = "mean", *,
                  weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Cross-entropy ``L_CE = −log p̂_y`` (the NLL; Mukhoti et al. 2020, §3, ``L_c``); equal to
    ``torch.nn.functional.cross_entropy`` in every mode.

    {conventions}
    """
    prepare(logits, targets, reduction, ignore_index)  # the checks; torch computes it
    g = torch.as_tensor(logits)
    g = g if g.dtype == torch.float64 else g.float()
    t = torch.as_tensor(targets).to(g.device)
    w = None if weight is None else _check_weight_of(weight, g)
    return F.cross_entropy(g, t.to(g.dtype) if t.is_floating_point() else t.long(), weight=w,
                           ignore_index=IGNORE_INDEX if ignore_index is None else ignore_index,
                           reduction=reduction)


def _check_convention(convention: str) -> str:
    if convention not in ("uniform", "mukhoti"):
        raise ValueError(f"convention must be 'uniform' or 'mukhoti', got {convention!r}")
    return convention


@full_precision
def label_smoothing_loss(logits: ArrayLike, targets: ArrayLike, epsilon: float = 0.05,
                         convention: Literal["uniform", "mukhoti"] = "uniform", reduction: Reduction = "mean", *,
                         weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Cross-entropy against a smoothed label ``s``: ``L = −Σ_k s_k log p̂_k`` (Müller et al. 2019).

    Two conventions for ``s``: ``"uniform"`` (Wang et al. (2021), §3) ``s = (1 − ε)·y + ε/K``;
    ``"mukhoti"`` (Mukhoti et al. (2020), §4, α = ε) ``s = (1 − ε)·y + ε·(1 − y)/(K − 1)``, all
    the smoothed mass on the *other* classes. ε = 0 is plain CE. Probability targets ``q``
    are smoothed the same way (``y`` replaced by ``q``).

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    epsilon, convention = _check_unit(epsilon, "epsilon"), _check_convention(convention)
    k = rows.x.shape[1]

    def smooth(total: Tensor, ce: Tensor) -> Tensor:
        return total / k if convention == "uniform" else (total - ce) / (k - 1)

    def hard(lp: Tensor, y: Tensor) -> Tensor:
        ce = _ce(lp, y)
        return (1 - epsilon) * ce + epsilon * smooth(-lp.sum(dim=1), ce)

    def each(lp: Tensor, x: Tensor) -> Tensor:
        return (1 - epsilon) * -lp + epsilon * smooth(-lp.sum(dim=1, keepdim=True), -lp)

    return per_sample_loss(rows, hard, each, weight, reduction)


@full_precision
def logit_norm_loss(logits: ArrayLike, targets: ArrayLike, alpha: float = 0.01, p: float = 1.0,
                    reduction: Reduction = "mean", *, weight: ArrayLike | None = None,
                    ignore_index: int = IGNORE_INDEX) -> Tensor:
    """``L = CE + α‖g‖_p``: CE plus an L_p penalty on the logits ``g`` (Wang et al. (2021), §3;
    the student report (2021), §2.3).

    ``p ≥ 1`` (a norm); both use p = 1, Wang et al. (2021), §3.1, sweep α in {0.001, ..., 0.1}.
    By the student report's Theorem 1 scaling logits up sharpens the softmax, so shrinking
    them tempers confidence.

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    alpha, p = check_nonnegative(alpha, "alpha"), check_nonnegative(p, "p")
    if p < 1:
        raise ValueError(f"p (the order of the logit norm) must be >= 1, got {p}")
    penalty = alpha * torch.linalg.vector_norm(rows.x, ord=p, dim=1)
    return per_sample_loss(rows, lambda lp, y: F.cross_entropy(rows.x, y, reduction="none") + penalty,
                           lambda lp, x: -lp + penalty[:, None], weight, reduction)


@full_precision
def entropy_reg_loss(logits: ArrayLike, targets: ArrayLike, alpha: float = 0.1, reduction: Reduction = "mean", *,
                     weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """``L = CE − α·H(p̂)`` with ``H(p̂) = −Σ_k p̂_k log p̂_k`` (the student report (2021), §2.3;
    Pereyra et al. 2017). Rewards high-entropy predictions; not bounded below by 0.

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    alpha = check_nonnegative(alpha, "alpha")

    def entropy(lp: Tensor) -> Tensor:
        return -(lp.exp() * lp).sum(dim=1)

    return per_sample_loss(rows, lambda lp, y: _ce(lp, y) - alpha * entropy(lp),
                           lambda lp, x: -lp - alpha * entropy(lp)[:, None], weight, reduction)


@full_precision
def brier_loss(logits: ArrayLike, targets: ArrayLike, reduction: Reduction = "mean", *,
               weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Brier score ``L = Σ_k (p̂_k − y_k)²`` (Brier 1950; a baseline of Mukhoti et al. (2020);
    Lin et al. 2024, §3), as u_gBS with β = γ = 2 in log space, so ``1 − p_y`` keeps its
    digits when ``p_y → 1``. Probability targets: ``Σ_k q_k ‖p̂ − e_k‖²``, the expected
    Brier score over the target distribution (``‖p̂ − q‖²`` plus a term constant in p̂).

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    return per_sample_loss(rows, lambda lp, y: _u._log_u_gbs(lp, y, 2.0, 2.0).exp(),
                           lambda lp, x: _u._log_u_gbs_all(lp, 2.0, 2.0).exp(), weight, reduction,
                           lambda x, y: label_stats(x, y, brier=True).log_brier.exp())
