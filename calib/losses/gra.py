"""Gradient weighting (GRA; Lin et al. 2024, §4): the value is ``u · CE`` with ``u`` detached, so the
gradient is exactly ``u · ∇CE``. FL-GRA, FLSD-GRA, DFL-GRA, BSCE-GRA and any weight function."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .._checks import ArrayLike, reads_values
from . import uncertainty as _u
from ._fused import weighted_ce
from ._core import IGNORE_INDEX, Reduction, Rows, WeightFn, _ce, full_precision, per_sample_loss, prepare
from .focal import _flsd53_args, _flsd53_gamma, _fused, brier_weight, dual_focal_weight, flsd53_weight, focal_weight
from .uncertainty import Gamma, check_gamma


def _gra(lp: Tensor, y: Tensor, log_weight: Callable[..., Tensor], *args: object) -> Tensor:
    """``u · CE`` with u a constant: value u·CE, gradient exactly u·∇CE (Lin et al. (2024), §4.2, Eq. 9).

    The weight is computed without autograd (it is detached anyway), which keeps the
    backward pass as cheap as CE's.
    """
    with torch.no_grad():
        weight = log_weight(lp.detach(), y, *args).exp()
    return _ce(lp, y) * weight


def _gra_each(lp: Tensor, log_weight_all: Callable[..., Tensor], *args: object) -> Tensor:
    """``(M, K)``: ``u_k · CE_k`` with every ``u_k`` a constant (probability targets)."""
    with torch.no_grad():
        weight = log_weight_all(lp.detach(), *args).exp()
    return -lp * weight


def _gra_loss(rows: Rows, reduction: str, weight: ArrayLike | None, log_u: Callable[..., Tensor],
              log_u_all: Callable[..., Tensor], *args: object,
              fast: Callable[[Tensor, Tensor], Tensor] | None = None) -> Tensor:
    return per_sample_loss(rows, lambda lp, y: _gra(lp, y, log_u, *args),
                           lambda lp, x: _gra_each(lp, log_u_all, *args), weight, reduction, fast)


@full_precision
def focal_gra_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 3.0, reduction: Reduction = "mean", *,
                   weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """FL-GRA: gradient ``u_FL · ∇CE`` with ``u_FL = (1 − p̂_y)^γ`` held constant (Lin et al. (2024), §5.3).

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    gamma = check_gamma(gamma, rows.x.shape[0])
    return _gra_loss(rows, reduction, weight, _u._log_u_fl, _u._log_u_fl_all, gamma,
                     fast=lambda x, y: _fused(x, y, gamma, focal_weight, detach=True))


def _log_u_flsd53(lp: Tensor, y: Tensor, gamma_low: float, gamma_high: float, threshold: float) -> Tensor:
    """``log (1 − p̂_y)^γ_i`` with FLSD-53's ``γ_i = gamma_high if p̂_y < threshold else gamma_low``."""
    gamma = _flsd53_gamma(lp.gather(1, y[:, None]).squeeze(1).exp(), gamma_low, gamma_high, threshold)
    return _u._log_u_fl(lp, y, gamma)


def _log_u_flsd53_all(lp: Tensor, gamma_low: float, gamma_high: float, threshold: float) -> Tensor:
    return _flsd53_gamma(lp.exp(), gamma_low, gamma_high, threshold) * _u._log_rest_all(lp)


@full_precision
def flsd53_gra_loss(logits: ArrayLike, targets: ArrayLike, gamma_low: float = 3.0, gamma_high: float = 5.0,
                    threshold: float = 0.2, reduction: Reduction = "mean", *, weight: ArrayLike | None = None,
                    ignore_index: int = IGNORE_INDEX) -> Tensor:
    """FLSD-53-GRA: gradient ``(1 − p̂_y)^γ_i · ∇CE`` with the weight held constant.

    The FLSD-GRA column of Lin et al. (2024), Table 2 (§5.3): the FLSD-53 schedule
    (:func:`flsd53_loss`) with the focal weight ``u_i = (1 − p̂_y)^γ_i`` detached.

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    args = _flsd53_args(gamma_low, gamma_high, threshold)
    return _gra_loss(rows, reduction, weight, _log_u_flsd53, _log_u_flsd53_all, *args,
                     fast=lambda x, y: weighted_ce(x, y, flsd53_weight(args), detach=True))


@full_precision
def dual_focal_gra_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 5.0, reduction: Reduction = "mean",
                        *, weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """DFL-GRA: gradient ``u_DFL · ∇CE`` with ``u_DFL = (1 − p̂_y + p̂_j)^γ`` constant
    (Lin et al. (2024), §5.3).

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    gamma = check_gamma(gamma, rows.x.shape[0])
    return _gra_loss(rows, reduction, weight, _u._log_u_dfl, _u._log_u_dfl_all, gamma,
                     fast=lambda x, y: _fused(x, y, gamma, dual_focal_weight, detach=True, rival=True))


@full_precision
def bsce_gra_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 4.0, norm: float = 2.0,
                  reduction: Reduction = "mean", *, weight: ArrayLike | None = None,
                  ignore_index: int = IGNORE_INDEX) -> Tensor:
    """BSCE-GRA: gradient ``‖p̂ − y‖_β^γ · ∇CE`` with the weight held constant
    (Lin et al. (2024), §4.3, Eq. 14).

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    gamma, norm = check_gamma(gamma, rows.x.shape[0]), _u._check_norm(norm)
    fast = None if norm != 2 else lambda x, y: _fused(  # β = 2: exp((γ/2) log ‖p̂ − y‖²)
        x, y, gamma, brier_weight, detach=True, brier=True)
    return _gra_loss(rows, reduction, weight, _u._log_u_gbs, _u._log_u_gbs_all, gamma, norm, fast=fast)


def uncertainty_gra(weight_fn: WeightFn, name: str | None = None) -> Callable[..., Tensor]:
    """Turn a sample-wise weight into a GRA loss (Lin et al. (2024), §4.2): gradient = ``u(p̂, y) · ∇CE``.

    Args:
        weight_fn: ``weight_fn(probs, targets) -> (N,)`` non-negative weights, e.g.
            ``functools.partial(calib.losses.uncertainty.u_gbs, gamma=4.0, norm=2.0)``. It
            sees the detached softmax, so it never needs to be differentiable.
        name: a name for the returned function (``repr`` and error messages).

    Returns:
        ``loss(logits, targets, reduction="mean", *, weight=None, ignore_index=-100)`` for
        integer labels (a weight function of one label has no probability-target form).
    """
    if not callable(weight_fn):
        raise TypeError(f"weight_fn must be callable, got {type(weight_fn).__name__}")
    label = name or getattr(weight_fn, "__name__", None) or repr(weight_fn)

    def hard(lp: Tensor, y: Tensor) -> Tensor:
        u = torch.as_tensor(weight_fn(lp.detach().exp(), y))
        if tuple(u.shape) != (lp.shape[0],):
            raise ValueError(f"weight_fn {label} must return shape (N,) = ({lp.shape[0]},), got {tuple(u.shape)}")
        if reads_values(u) and (not bool(torch.isfinite(u).all()) or bool((u < 0).any())):
            raise ValueError(f"weight_fn {label} must return finite weights >= 0")
        return _ce(lp, y) * u.detach().to(device=lp.device, dtype=lp.dtype)

    @full_precision
    def loss(logits: ArrayLike, targets: ArrayLike, reduction: Reduction = "mean", *,
             weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
        rows = prepare(logits, targets, reduction, ignore_index, soft=False, name=f"uncertainty_gra[{label}]")
        return per_sample_loss(rows, hard, lambda lp, x: lp, weight, reduction)

    loss.__name__ = f"uncertainty_gra[{label}]"
    loss.__doc__ = f"GRA loss with weight {label}: value u·CE, gradient u·∇CE (Lin et al. (2024), §4.2)."
    return loss
