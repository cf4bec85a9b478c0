"""Sample-weighted cross-entropy ``u · CE``: focal, FLSD-53, dual focal, inverse focal, BSCE.

The weight ``u`` is differentiated through (loss weighting; Lin et al. (2024), §4); the
``*_gra`` twins in :mod:`calib.losses.gra` detach it."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .._checks import (
    ArrayLike,
    check_nonnegative,
)
from . import uncertainty as _u
from ._core import Reduction, _ce, _check_unit, _full_precision, _prepare, _reduce
from .uncertainty import Gamma, check_gamma


# =========================================================================== focal family
def _focal_core(lp: Tensor, y: Tensor, gamma: Gamma) -> Tensor:
    return _ce(lp, y) * _u._log_u_fl(lp, y, gamma).exp()



@_full_precision
def focal_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 3.0, reduction: Reduction = "mean") -> Tensor:
    """Focal loss ``L_f = −(1 − p̂_y)^γ log p̂_y`` (Lin et al. 2017;
    Mukhoti et al. 2020, §3; Lin et al. 2024, Eq. 4).

    ``gamma`` is a number ≥ 0 or a ``(N,)`` tensor of per-sample values, which receives
    gradient (gamma-Net, Wang & Golebiowski (2024), §4.1). γ = 0 is CE; Mukhoti et al. (2020)
    use γ = 3. By Mukhoti et al. (2020), App. A
    ``L_f ≥ KL(q‖p̂) − γ H(p̂)``: focal loss minimises CE while raising the entropy.
    """
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    return _reduce(_focal_core(F.log_softmax(x, dim=1), y, gamma), reduction)



@_full_precision
def flsd53_loss(
    logits: ArrayLike,
    targets: ArrayLike,
    gamma_low: float = 3.0,
    gamma_high: float = 5.0,
    threshold: float = 0.2,
    reduction: Reduction = "mean",
) -> Tensor:
    """FLSD-53: focal loss with a sample-dependent γ (Lin et al. 2024, §5 and App. 11, who credit it to
    the NeurIPS version of Mukhoti et al. 2020).

    ``γ_i = gamma_high if p̂_{i,y} < threshold else gamma_low`` (5 below 0.2, else 3), chosen
    from the true-class probability; γ is a constant (no gradient flows through the choice).
    """
    x, y = _prepare(logits, targets, reduction)
    gamma_low, gamma_high = check_nonnegative(gamma_low, "gamma_low"), check_nonnegative(gamma_high, "gamma_high")
    threshold = _check_unit(threshold, "threshold")
    lp = F.log_softmax(x, dim=1)
    p_y = lp.detach().gather(1, y[:, None]).squeeze(1).exp()
    gamma = torch.where(p_y < threshold, gamma_high, gamma_low).to(lp.dtype)
    return _reduce(_focal_core(lp, y, gamma), reduction)



@_full_precision
def dual_focal_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 5.0, reduction: Reduction = "mean") -> Tensor:
    """Dual focal loss ``L = −(1 − p̂_y + p̂_j)^γ log p̂_y`` (Tao et al. 2023; Lin et al. 2024, Eq. 5).

    ``p̂_j`` is the largest probability strictly below ``p̂_y`` (0 if none): see
    :func:`calib.uncertainty.u_dfl`. Gradient flows through ``p̂_y`` and ``p̂_j``. γ = 5 in Lin et al. (2024).
    """
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    lp = F.log_softmax(x, dim=1)
    return _reduce(_ce(lp, y) * _u._log_u_dfl(lp, y, gamma).exp(), reduction)



@_full_precision
def inverse_focal_loss(
    logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 2.0, reduction: Reduction = "mean"
) -> Tensor:
    """Inverse focal loss ``L = −(1 + p̂_y)^γ̄ log p̂_y`` (Wang et al. (2021), §5.2, Eq. 4).

    The weight *grows* with confidence: easy samples count more, the opposite of focal loss.
    """
    x, y = _prepare(logits, targets, reduction)
    gamma = check_gamma(gamma, x.shape[0])
    lp = F.log_softmax(x, dim=1)
    p_y = lp.gather(1, y[:, None]).squeeze(1).exp()
    return _reduce(_ce(lp, y) * (gamma * torch.log1p(p_y)).exp(), reduction)



@_full_precision
def bsce_loss(
    logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 4.0, norm: float = 2.0, reduction: Reduction = "mean"
) -> Tensor:
    """BSCE, loss-weighted: ``L = ‖p̂ − y‖_β^γ · CE`` (Lin et al. (2024), §4.3, Uncertainty-CE with u_gBS).

    ``norm`` is the order β, ``gamma`` the exponent γ. The gradient flows through the weight.
    """
    x, y = _prepare(logits, targets, reduction)
    gamma, norm = check_gamma(gamma, x.shape[0]), _u._check_norm(norm)
    lp = F.log_softmax(x, dim=1)
    return _reduce(_ce(lp, y) * _u._log_u_gbs(lp, y, gamma, norm).exp(), reduction)
