"""What every calibrator of :mod:`calib.posthoc` shares: input checks and the fitted-state error."""
from __future__ import annotations

import warnings

import torch

from .._checks import ArrayLike, check_labels, check_logits

Tensor = torch.Tensor


class NotFittedError(ValueError, AttributeError):
    """A calibrator was used before ``fit`` (like scikit-learn's ``NotFittedError``)."""


def _logits_labels(logits: ArrayLike, labels: ArrayLike) -> tuple[Tensor, Tensor]:
    """Validated ``(N, K)`` logits (probabilities refused) and int64 labels on their device."""
    g = check_logits(logits, "logits", refuse_probs=True)
    y = check_labels(labels, g.shape[0], g.shape[1], "labels").to(g.device)
    return g.detach(), y


def fit_inputs(logits: ArrayLike, labels: ArrayLike, who: str) -> tuple[Tensor, Tensor]:
    """:func:`_logits_labels` plus what a fitted map needs: N >= 2 and two distinct labels.

    With one class in the labels the likelihood keeps rising as that class's probability
    goes to 1, so no finite fit exists.
    """
    g, y = _logits_labels(logits, labels)
    if g.shape[0] < 2:
        raise ValueError(f"logits must hold at least 2 samples to fit {who}, got N = {g.shape[0]}")
    lo, hi = int(y.min()), int(y.max())
    if lo == hi:
        raise ValueError(f"labels hold a single class ({lo}); fitting {who} needs at least 2 classes in the labels")
    return g, y


def warn_absent_classes(y: Tensor, num_classes: int, who: str) -> None:
    """Warn when some class never occurs in the labels (its intercept has no finite optimum)."""
    absent = torch.nonzero(torch.bincount(y, minlength=num_classes) == 0).flatten().tolist()
    if absent:
        shown = ", ".join(map(str, absent[:10])) + (", ..." if len(absent) > 10 else "")
        warnings.warn(
            f"class(es) {shown} never occur in the labels, so {who} drives their probability toward 0 "
            "(no finite optimum without regularisation); use a larger validation set or regularise the intercept",
            RuntimeWarning,
            stacklevel=3,
        )


def check_logits_like(logits: ArrayLike, num_classes: int, who: str) -> Tensor:
    """Validated ``(N, K)`` logits (probabilities refused) with the fitted ``K``."""
    g = check_logits(logits, "logits", refuse_probs=True)
    if g.shape[1] != num_classes:
        raise ValueError(f"logits have K = {g.shape[1]} classes but {who} was fitted on K = {num_classes}")
    return g.detach()


def not_fitted(who: str) -> NotFittedError:
    return NotFittedError(f"{who} is not fitted yet; call .fit(logits, labels) first")
