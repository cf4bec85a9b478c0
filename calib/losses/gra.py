"""Gradient weighting (GRA; Lin et al. 2024, §4): the value is ``u · CE`` with ``u`` detached, so the
gradient is exactly ``u · ∇CE``. FL-GRA, FLSD-GRA, DFL-GRA, BSCE-GRA and any weight function."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import (
    ArrayLike,
    check_nonnegative,
    reads_values,
)
from . import uncertainty as _u
from ._core import Reduction, WeightFn, _ce, _check_unit, _full_precision, _prepare, _reduce
from .uncertainty import Gamma, check_gamma


# =========================================================================== gradient weighting (GRA)
def _gra(lp: Tensor, y: Tensor, log_weight: Callable[..., Tensor], *args: object) -> Tensor:
    """``u · CE`` with u a constant: value u·CE, gradient exactly u·∇CE (Lin et al. (2024), §4.2, Eq. 9).

    The weight is computed without autograd (it is detached anyway), which keeps the
    backward pass as cheap as CE's.
    """
    with torch.no_grad():
        weight = log_weight(lp.detach(), y, *args).exp()
    return _ce(lp, y) * weight



@_full_precision
def focal_gra_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 3.0, reduction: Reduction = "mean") -> Tensor:
    """FL-GRA: gradient ``u_FL · ∇CE`` with ``u_FL = (1 − p̂_y)^γ`` held constant (Lin et al. (2024), §5.3)."""
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    return _reduce(_gra(F.log_softmax(x, dim=1), y, _u._log_u_fl, gamma), reduction)



def _log_u_flsd53(lp: Tensor, y: Tensor, gamma_low: float, gamma_high: float, threshold: float) -> Tensor:
    """``log (1 − p̂_y)^γ_i`` with FLSD-53's ``γ_i = gamma_high if p̂_y < threshold else gamma_low``."""
    p_y = lp.gather(1, y[:, None]).squeeze(1).exp()
    gamma = torch.where(p_y < threshold, gamma_high, gamma_low).to(lp.dtype)
    return _u._log_u_fl(lp, y, gamma)



@_full_precision
def flsd53_gra_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    gamma_low: float = 3.0,
    gamma_high: float = 5.0,
    threshold: float = 0.2,
    reduction: Reduction = "mean",
) -> Tensor:
    """FLSD-53-GRA: gradient ``(1 − p̂_y)^γ_i · ∇CE`` with the weight held constant.

    The FLSD-GRA column of Lin et al. (2024), Table 2 (§5.3): the FLSD-53 schedule (Lin et al.
    (2024), App. 11; ``γ_i = 5`` if ``p̂_y < 0.2`` else 3, see :func:`flsd53_loss`) with the focal
    weight ``u_i = (1 − p̂_y)^γ_i`` detached, so the value is ``u_i · CE_i`` and the
    gradient is exactly ``u_i · ∇CE_i`` (Lin et al. 2024, Eq. 9).
    """
    x, y = _prepare(logits, targets, reduction)
    gamma_low, gamma_high = check_nonnegative(gamma_low, "gamma_low"), check_nonnegative(gamma_high, "gamma_high")
    threshold = _check_unit(threshold, "threshold")
    lp = F.log_softmax(x, dim=1)
    return _reduce(_gra(lp, y, _log_u_flsd53, gamma_low, gamma_high, threshold), reduction)



@_full_precision
def dual_focal_gra_loss(
    logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 5.0, reduction: Reduction = "mean"
) -> Tensor:
    """DFL-GRA: gradient ``u_DFL · ∇CE`` with ``u_DFL = (1 − p̂_y + p̂_j)^γ`` constant
    (Lin et al. (2024), §5.3)."""
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    return _reduce(_gra(F.log_softmax(x, dim=1), y, _u._log_u_dfl, gamma), reduction)



@_full_precision
def bsce_gra_loss(
    logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 4.0, norm: float = 2.0, reduction: Reduction = "mean"
) -> Tensor:
    """BSCE-GRA: gradient ``‖p̂ − y‖_β^γ · ∇CE`` with the weight held constant
    (Lin et al. (2024), §4.3, Eq. 14)."""
    x, y = _prepare(logits, targets, reduction)
    gamma, norm = check_gamma(gamma, x.shape[0]), _u._check_norm(norm)
    return _reduce(_gra(F.log_softmax(x, dim=1), y, _u._log_u_gbs, gamma, norm), reduction)



def uncertainty_gra(weight_fn: WeightFn, name: str | None = None) -> Callable[..., Tensor]:
    """Turn a sample-wise weight into a GRA loss (Lin et al. (2024), §4.2): gradient = ``u(p̂, y) · ∇CE``.

    Args:
        weight_fn: ``weight_fn(probs, targets) -> (N,)`` non-negative weights, e.g.
            ``functools.partial(calib.uncertainty.u_gbs, gamma=4.0, norm=2.0)``. It sees the
            detached softmax, so it never needs to be differentiable.
        name: a name for the returned function (``repr`` and error messages).

    Returns:
        ``loss(logits, targets, reduction="mean")``.
    """
    if not callable(weight_fn):
        raise TypeError(f"weight_fn must be callable, got {type(weight_fn).__name__}")
    label = name or getattr(weight_fn, "__name__", None) or repr(weight_fn)

    @_full_precision
    def loss(logits: ArrayLike, targets: ArrayLike, reduction: Reduction = "mean") -> Tensor:
        x, y = _prepare(logits, targets, reduction)
        lp = F.log_softmax(x, dim=1)
        weight = torch.as_tensor(weight_fn(lp.detach().exp(), y))
        if tuple(weight.shape) != (x.shape[0],):
            raise ValueError(f"weight_fn {label} must return shape (N,) = ({x.shape[0]},), got {tuple(weight.shape)}")
        if reads_values(weight) and (not bool(torch.isfinite(weight).all()) or bool((weight < 0).any())):
            raise ValueError(f"weight_fn {label} must return finite weights >= 0")
        return _reduce(_ce(lp, y) * weight.detach().to(device=lp.device, dtype=lp.dtype), reduction)

    loss.__name__ = f"uncertainty_gra[{label}]"
    loss.__doc__ = f"GRA loss with weight {label}: value u·CE, gradient u·∇CE (Lin et al. (2024), §4.2)."
    return loss
