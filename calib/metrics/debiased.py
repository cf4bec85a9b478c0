"""The ℓ2 calibration error and its debiased estimate (Kumar, Liang & Ma 2019)."""
from __future__ import annotations

from typing import Literal

import torch

from .._checks import ArrayLike
from ._inputs import Checked, check_n_bins, checked
from .binned import bin_totals

Tensor = torch.Tensor
Mode = Literal["top_label", "classwise"]
_MODES = ("top_label", "classwise")


def _equal_mass_index(f: Tensor, n_bins: int) -> Tensor:
    """Equal-mass bins of each row of ``f`` ``(R, N)``, as Kumar et al. (2019) bin.

    The sorted values are cut into ``B = min(n_bins, N)`` runs whose sizes differ by at
    most one (longer runs first); a boundary lies halfway between the last value of a run
    and the first of the next, the last boundary is 1, and a value goes to the first bin
    whose boundary is >= it. Equal boundaries leave empty bins, which count for nothing.
    """
    n = f.shape[1]
    b = min(n_bins, n)
    sizes = torch.full((b,), n // b, device=f.device)
    sizes[: n % b] += 1
    ends = torch.cumsum(sizes, 0)[:-1]  # first index of runs 2..B
    s = f.sort(dim=1).values
    bounds = torch.cat([(s[:, ends - 1] + s[:, ends]) / 2, torch.ones_like(s[:, :1])], dim=1)
    # clamped: a NaN (refused once the checks are read) would fall past the last bound
    return torch.searchsorted(bounds, f.contiguous()).clamp_(max=b - 1), b


def _squared_errors(f: Tensor, y: Tensor, n_bins: int) -> tuple[Tensor, Tensor]:
    """Per row of ``f``, ``y`` ``(R, N)``: the plug-in ``sum_b w_b (fbar_b - ybar_b)^2`` and the
    variance estimate ``sum_{b: n_b >= 2} w_b ybar_b (1 - ybar_b) / (n_b - 1)``, ``w_b = n_b / N``."""
    r, n = f.shape
    idx, b = _equal_mass_index(f, n_bins)
    cell = (idx + b * torch.arange(r, device=f.device)[:, None]).view(-1)
    size, y_sum, f_sum = bin_totals(cell, r * b, y.reshape(-1), f.reshape(-1)).view(3, r, b)
    filled = size.clamp_min(1)
    f_bar, y_bar = f_sum / filled, y_sum / filled
    plug_in = (size * (f_bar - y_bar) ** 2).sum(1) / n
    variance = torch.where(size >= 2, y_bar * (1 - y_bar) / (size - 1).clamp_min(1), 0.0)
    return plug_in, (size * variance).sum(1) / n


def _per_class(probs: ArrayLike, labels: ArrayLike, n_bins: int, mode: str,
               validate: bool) -> tuple[Tensor, Tensor, Checked]:
    """``(f, y, checked)``: rows of (forecast, outcome) pairs, one row per class or one for the top label."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
    check_n_bins(n_bins)
    c = checked(probs, labels, validate=validate)
    if mode == "top_label":
        return c.conf.double()[None], c.correct.double()[None], c
    k = c.p.shape[1]
    return c.p.double().T, torch.nn.functional.one_hot(c.y, k).double().T, c


@torch.no_grad()
def l2_ce(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, mode: Mode = "top_label",
          debiased: bool = True, validate: bool = True) -> float:
    """ℓ2 calibration error over equal-mass bins, debiased (Kumar, Liang & Ma 2019, section 5).

    For forecasts ``f_i`` with outcomes ``y_i`` (``mode="top_label"``: the confidence
    ``c_i`` and correctness ``pi_i``; ``"classwise"``: for each class ``k``, ``p_ik`` and
    ``1[y_i = k]``), bins ``b`` with ``n_b`` samples, mean forecast ``fbar_b`` and mean
    outcome ``ybar_b``, and ``w_b = n_b / N``:

    * plug-in (``debiased=False``): ``CE^2 = sum_b w_b (fbar_b - ybar_b)^2``. Its expected
      value exceeds the binned error by the variance of ``ybar_b`` (:func:`l2_ce_bias`),
      so it overstates the error of a well calibrated model, most with many bins;
    * debiased: ``CE^2 = sum_{b: n_b >= 2} w_b [(fbar_b - ybar_b)^2 - ybar_b (1 - ybar_b) / (n_b - 1)]``,
      unbiased for the squared binned error, needing far fewer samples for the same
      accuracy (their Theorem 5.4).

    Returns ``sqrt(max(CE^2, 0))``; for ``"classwise"``, ``sqrt(mean_k max(CE_k^2, 0))``.
    Bins: :func:`_equal_mass_index`. Matches ``calibration.lower_bound_scaling_ce`` of
    the authors' package ``uncertainty-calibration``.
    """
    f, y, c = _per_class(probs, labels, n_bins, mode, validate)
    plug_in, variance = _squared_errors(f, y, n_bins)
    sq = (plug_in - variance).clamp_min(0) if debiased else plug_in
    return c.result(sq.mean().sqrt())[0]


@torch.no_grad()
def l2_ce_bias(probs: ArrayLike, labels: ArrayLike, n_bins: int = 15, *, mode: Mode = "top_label",
               validate: bool = True) -> float:
    """The estimated bias of the plug-in squared ℓ2 error (Kumar, Liang & Ma 2019, section 5).

    ``sum_{b: n_b >= 2} (n_b / N) ybar_b (1 - ybar_b) / (n_b - 1)``: the unbiased estimate of
    ``sum_b w_b Var(ybar_b)``, what :func:`l2_ce` subtracts from the plug-in ``CE^2``
    (mean over classes for ``mode="classwise"``). It grows like ``n_bins / N``.
    """
    f, y, c = _per_class(probs, labels, n_bins, mode, validate)
    return c.result(_squared_errors(f, y, n_bins)[1].mean())[0]
