"""Cross-entropy and its regularisers (label smoothing, logit norm, entropy), and the Brier score."""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import (
    ArrayLike,
    check_nonnegative,
)
from . import uncertainty as _u
from ._core import Reduction, _ce, _check_unit, _full_precision, _prepare, _reduce


# =========================================================================== CE and regularisers
@_full_precision
def cross_entropy(logits: ArrayLike, targets: ArrayLike, reduction: Reduction = "mean") -> Tensor:
    """Cross-entropy ``L_CE = −log p̂_y`` (the NLL; Mukhoti et al. 2020, §3, ``L_c``)."""
    x, y = _prepare(logits, targets, reduction)
    return F.cross_entropy(x, y, reduction=reduction)



@_full_precision
def label_smoothing_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    epsilon: float = 0.05,
    convention: Literal["uniform", "mukhoti"] = "uniform",
    reduction: Reduction = "mean",
) -> Tensor:
    """Cross-entropy against a smoothed label ``s``: ``L = −Σ_k s_k log p̂_k`` (Müller et al. 2019).

    Two conventions for ``s`` (DESIGN.md §5):

    * ``"uniform"`` (Wang et al. (2021), §3): ``s = (1 − ε)·y + ε/K``, so
      ``L = (1 − ε)·CE + ε·CE(u, p̂)`` with ``u`` uniform (Wang et al. (2021), Eq. 1);
    * ``"mukhoti"`` (Mukhoti et al. (2020), §4, with α = ε): ``s = (1 − ε)·y + ε·(1 − y)/(K − 1)``, all the
      smoothed mass on the *other* classes.

    ε = 0 is plain CE under both. Mukhoti et al. (2020) find ε = 0.05 best; Wang et al. (2021) sweep 0.01-0.09.
    """
    x, y = _prepare(logits, targets, reduction)
    epsilon = _check_unit(epsilon, "epsilon")
    if convention not in ("uniform", "mukhoti"):
        raise ValueError(f"convention must be 'uniform' or 'mukhoti', got {convention!r}")
    lp = F.log_softmax(x, dim=1)
    ce, total = _ce(lp, y), -lp.sum(dim=1)
    k = x.shape[1]
    smooth = total / k if convention == "uniform" else (total - ce) / (k - 1)
    return _reduce((1 - epsilon) * ce + epsilon * smooth, reduction)



@_full_precision
def logit_norm_loss(
    logits: ArrayLike, targets: ArrayLike, alpha: float = 0.01, p: float = 1.0, reduction: Reduction = "mean"
) -> Tensor:
    """``L = CE + α‖g‖_p``: CE plus an L_p penalty on the logits ``g`` (Wang et al.
    (2021), §3; the student report (2021), §2.3).

    ``p ≥ 1`` (a norm); the student report (2021) and Wang et al. (2021) use p = 1; Wang et
    al. (2021), §3.1, sweep α in {0.001, 0.005, 0.01, 0.05, 0.1} (the student report states
    no α). By the student report (2021)'s Theorem 1
    scaling logits up sharpens the softmax, so shrinking them tempers confidence.
    """
    x, y = _prepare(logits, targets, reduction)
    alpha = check_nonnegative(alpha, "alpha")
    p = check_nonnegative(p, "p")
    if p < 1:
        raise ValueError(f"p (the order of the logit norm) must be >= 1, got {p}")
    ce = F.cross_entropy(x, y, reduction="none")
    return _reduce(ce + alpha * torch.linalg.vector_norm(x, ord=p, dim=1), reduction)



@_full_precision
def entropy_reg_loss(
    logits: ArrayLike, targets: ArrayLike, alpha: float = 0.1, reduction: Reduction = "mean"
) -> Tensor:
    """``L = CE − α·H(p̂)`` with ``H(p̂) = −Σ_k p̂_k log p̂_k`` (the student
    report (2021), §2.3; Pereyra et al. 2017).

    Rewards high-entropy (less peaked) predictions. Not bounded below by 0: H ≤ log K.
    """
    x, y = _prepare(logits, targets, reduction)
    alpha = check_nonnegative(alpha, "alpha")
    lp = F.log_softmax(x, dim=1)
    entropy = -(lp.exp() * lp).sum(dim=1)
    return _reduce(_ce(lp, y) - alpha * entropy, reduction)



@_full_precision
def brier_loss(logits: ArrayLike, targets: ArrayLike, reduction: Reduction = "mean") -> Tensor:
    """Brier score ``L = Σ_k (p̂_k − y_k)²`` (Brier 1950; a baseline of Mukhoti
    et al. (2020); Lin et al. 2024, §3).

    Computed as u_gBS with β = γ = 2 (Lin et al. (2024), Eq. 11) in log space, so ``1 − p_y`` keeps its
    digits when ``p_y → 1``.
    """
    x, y = _prepare(logits, targets, reduction)
    return _reduce(_u._log_u_gbs(F.log_softmax(x, dim=1), y, 2.0, 2.0).exp(), reduction)
