"""Scores of the whole predicted distribution: accuracy, NLL, Brier score and Murphy's
decomposition of the Brier score (whose reliability term measures canonical calibration)."""
from __future__ import annotations

import torch

from .._checks import ArrayLike, check_positive_int, check_probs_fast
from ._inputs import checked

Tensor = torch.Tensor

#: Probabilities are clamped at this value before the log in :func:`nll`, so a single
#: confidently wrong prediction costs at most ``-log(1e-12) = 27.6`` nats, not inf.
NLL_EPS = 1e-12
# Row-sum tolerance of forecast_groups' probability check.
_ROW_SUM_ATOL = 1e-3


def _at_label(p: Tensor, y: Tensor) -> Tensor:
    """``p[i, y_i]`` for every row, float64."""
    return p.gather(1, y[:, None]).squeeze(1).double()


def _nll_terms(p: Tensor, y: Tensor) -> Tensor:
    return -_at_label(p, y).clamp_min(NLL_EPS).log()


def _brier_terms(p: Tensor, y: Tensor) -> Tensor:
    """``sum_k (p_ik - 1[k = y_i])^2 = sum_k p_ik^2 - 2 p_{i,y_i} + 1``."""
    return p.double().square().sum(dim=1) - 2 * _at_label(p, y) + 1


@torch.no_grad()
def accuracy(probs: ArrayLike, labels: ArrayLike, *, validate: bool = True) -> float:
    """Fraction of samples whose arg-max class is the label: ``(1/N) sum_i 1[yhat_i = y_i]``.

    Ties go to the first of the tied classes, as ``argmax`` does.
    """
    c = checked(probs, labels, validate=validate)
    return c.result(c.correct.double().mean())[0]


@torch.no_grad()
def nll(probs: ArrayLike, labels: ArrayLike, *, validate: bool = True) -> float:
    """Negative log-likelihood ``-(1/N) sum_i log max(p_{i,y_i}, eps)`` in nats.

    The clamp at ``eps = NLL_EPS = 1e-12`` keeps a probability that underflowed to 0
    (common in float32) from turning the mean into inf; it only changes terms whose true
    value exceeds 27.6 nats. NLL is the proper scoring rule that temperature scaling
    minimises (Guo et al. 2017; Mukhoti et al. (2020) section 3 tracks its over-fitting).
    """
    c = checked(probs, labels, validate=validate)
    return c.result(_nll_terms(c.p, c.y).mean())[0]


@torch.no_grad()
def brier_score(probs: ArrayLike, labels: ArrayLike, *, validate: bool = True) -> float:
    """Brier score ``(1/N) sum_i sum_k (p_ik - y_ik)^2`` with one-hot ``y`` (Brier 1950).

    Summed over classes and averaged over samples (Brier's original multi-class form), so
    it lies in [0, 2]. Lin et al. (2024) Eq. (12) splits its expectation into ``||p - eta||^2`` plus
    a term fixed by the true posterior ``eta``.
    """
    c = checked(probs, labels, validate=validate)
    return c.result(_brier_terms(c.p, c.y).mean())[0]


def forecast_groups(probs: ArrayLike, n_bins: int | None = None) -> tuple[Tensor, Tensor]:
    """Group the rows of ``probs``: ``(inverse, counts)`` with ``inverse[i]`` the group of row i.

    ``n_bins=None``: one group per distinct probability vector (exact, for forecasts that
    take finitely many values). ``n_bins=M``: one group per occupied cell of the regular
    grid with ``M`` equal-width bins ``[j/M, (j+1)/M)`` per class (1 in the last bin).
    """
    p = check_probs_fast(probs, "probs", atol=_ROW_SUM_ATOL).detach()
    if n_bins is None:
        keys = p.double()
    else:
        m = check_positive_int(n_bins, "n_bins")
        keys = (p.double() * m).floor().clamp_(0, m - 1).long()
    _, inverse, counts = torch.unique(keys, dim=0, return_inverse=True, return_counts=True)
    return inverse, counts


@torch.no_grad()
def brier_decomposition(probs: ArrayLike, labels: ArrayLike, n_bins: int | None = None, *,
                        validate: bool = True) -> dict[str, float]:
    """Murphy's decomposition ``brier = reliability - resolution + uncertainty``.

    Group the forecasts (:func:`forecast_groups`); for group ``g`` with weight
    ``w_g = |g|/N``, mean forecast ``pbar_g`` and label frequencies ``obar_g``, and overall
    label frequencies ``obar`` (Murphy 1973; DeGroot & Fienberg 1983)::

        reliability = sum_g w_g ||pbar_g - obar_g||^2      (calibration; 0 when calibrated)
        resolution  = sum_g w_g ||obar_g - obar||^2        (how much the groups differ)
        uncertainty = sum_k obar_k (1 - obar_k)            (the labels alone)

    ``reliability`` is the plug-in estimate of the squared *canonical* calibration error
    ``E ||E[onehot(Y) | p] - p||^2`` (package docstring). ``refinement = uncertainty -
    resolution`` is DeGroot and Fienberg's second term. With ``n_bins=None`` the groups
    are the distinct probability vectors and the identity is exact (to rounding). With
    ``n_bins`` the groups are cells of a grid with ``n_bins`` bins per class and the
    identity is only approximate: ``brier`` (the plain Brier score) differs from
    ``reliability - resolution + uncertainty`` by within-cell spread terms that vanish as
    the cells shrink. Returns floats ``brier``, ``reliability``, ``resolution``,
    ``uncertainty``, ``refinement``.
    """
    c = checked(probs, labels, validate=validate)
    c.verify()
    p, y = c.p, c.y
    inverse, counts = forecast_groups(p, n_bins)
    n, k = p.shape
    onehot = torch.nn.functional.one_hot(y, k).double()
    cnt = counts.double()[:, None]
    pbar = torch.zeros(len(counts), k, dtype=torch.float64, device=p.device).index_add_(0, inverse, p.double()) / cnt
    obar_g = torch.zeros_like(pbar).index_add_(0, inverse, onehot) / cnt
    obar = onehot.mean(0)
    w = cnt[:, 0] / n
    reliability, resolution, uncertainty, brier = torch.stack([
        (w * (pbar - obar_g).square().sum(1)).sum(), (w * (obar_g - obar).square().sum(1)).sum(),
        (obar * (1 - obar)).sum(), _brier_terms(p, y).mean()]).tolist()
    return {"brier": brier, "reliability": reliability, "resolution": resolution,
            "uncertainty": uncertainty, "refinement": uncertainty - resolution}
