"""Sample-weighted cross-entropy ``u · CE``: focal, FLSD-53, dual focal, inverse focal, BSCE.

The weight ``u`` is differentiated through (loss weighting; Lin et al. (2024), §4); the
``*_gra`` twins in :mod:`calib.losses.gra` detach it. Each loss is written twice: for an
integer label (``hard``) and for every class as the label (``each``, used with probability
targets: ``Σ_k q_k u_k CE_k``)."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .._checks import ArrayLike, check_nonnegative
from . import uncertainty as _u
from ._fused import LogWeight, Stats, weighted_ce
from ._core import IGNORE_INDEX, Reduction, _ce, _check_unit, full_precision, per_sample_loss, prepare
from .uncertainty import Gamma, check_gamma

_NEG_INF = float("-inf")


def _focal_core(lp: Tensor, y: Tensor, gamma: Gamma, ce: Tensor | None = None) -> Tensor:
    ce = _ce(lp, y) if ce is None else ce
    return ce * _u._log_u_fl(lp, y, gamma, ce).exp()


def _needs_grad(gamma: Gamma) -> bool:
    """A γ tensor with its own gradient (gamma-Net): the loss then goes through autograd."""
    return isinstance(gamma, Tensor) and gamma.requires_grad


def _sigma(log_a: Tensor, log_sum: Tensor) -> Tensor:
    """``a / Σ`` from logs, 0 where the sum is 0 (both parts −inf)."""
    return torch.where(log_sum > _NEG_INF, (log_a - log_sum).exp(), 0.0)


def focal_weight(gamma: Gamma) -> LogWeight:
    """``Λ = γ log(1 − p_y)``, ``dΛ/d log(1 − p_y) = γ`` (a per-row γ is a constant here)."""
    return lambda st, grads: (_u._times(gamma, st.log_rest), (None, gamma if grads else None, None, None))


def flsd53_weight(args: tuple[float, float, float]) -> LogWeight:
    """FLSD-53's ``Λ = γ_i log(1 − p_y)``, ``γ_i`` chosen from ``p_y`` and held constant."""
    def log_weight(st: Stats, grads: bool) -> tuple[Tensor, tuple[Tensor | None, ...]]:
        gamma = _flsd53_gamma(st.log_p.exp(), *args)
        return gamma * st.log_rest, (None, gamma if grads else None, None, None)

    return log_weight


def dual_focal_weight(gamma: Gamma) -> LogWeight:
    """``Λ = γ log(1 − p_y + p_j)``; ``dΛ`` = γ times the two parts' shares of the sum."""
    def log_weight(st: Stats, grads: bool) -> tuple[Tensor, tuple[Tensor | None, ...]]:
        has = st.log_rival > _NEG_INF  # no rival: log_sum = log(1 − p_y), without logaddexp(·, −inf),
        rival = torch.where(has, st.log_rival, st.log_rest)  # whose second derivative is NaN
        log_sum = torch.where(has, torch.logaddexp(st.log_rest, rival), st.log_rest)
        lam = _u._times(gamma, log_sum)
        if not grads:
            return lam, (None,) * 4
        return lam, (None, gamma * _sigma(st.log_rest, log_sum), gamma * _sigma(st.log_rival, log_sum), None)

    return log_weight


def inverse_focal_weight(gamma: Gamma) -> LogWeight:
    """``Λ = γ log(1 + p_y)``, ``dΛ/d log p_y = γ p_y/(1 + p_y)`` (inverse focal)."""
    def log_weight(st: Stats, grads: bool) -> tuple[Tensor, tuple[Tensor | None, ...]]:
        p = st.log_p.exp()
        return gamma * torch.log1p(p), ((gamma * p / (1 + p)) if grads else None, None, None, None)

    return log_weight


def brier_weight(gamma: Gamma) -> LogWeight:
    """``Λ = (γ/2) log ‖p − y‖²`` (BSCE with β = 2), ``dΛ/d log ‖p − y‖² = γ/2``."""
    return lambda st, grads: (_u._times(gamma, st.log_brier / 2), (None, None, None, gamma / 2 if grads else None))


def _fused(x: Tensor, y: Tensor, gamma: Gamma, weight: Callable[[Gamma], LogWeight], detach: bool = False,
           **stats: bool) -> Tensor:
    """``−log p_y · exp(Λ)`` from :func:`weighted_ce`, γ on ``x``'s dtype and device."""
    g = _u._as_exponent(gamma, x)
    return weighted_ce(x, y, weight(g), detach=detach, autograd=_needs_grad(g) and not detach, **stats)


@full_precision
def focal_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 3.0, reduction: Reduction = "mean", *,
               weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Focal loss ``L_f = −(1 − p̂_y)^γ log p̂_y`` (Lin et al. 2017;
    Mukhoti et al. 2020, §3; Lin et al. 2024, Eq. 4).

    ``gamma`` is a number ≥ 0 or a ``(N,)`` tensor of per-sample values, which receives
    gradient (gamma-Net, Wang & Golebiowski (2024), §4.1). γ = 0 is CE; Mukhoti et al. (2020)
    use γ = 3.

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    gamma = check_gamma(gamma, rows.x.shape[0])
    return per_sample_loss(rows, lambda lp, y: _focal_core(lp, y, gamma),
                           lambda lp, x: -lp * _u._log_u_fl_all(lp, gamma).exp(), weight, reduction,
                           lambda x, y: _fused(x, y, gamma, focal_weight))


def _flsd53_gamma(p: Tensor, gamma_low: float, gamma_high: float, threshold: float) -> Tensor:
    """γ = ``gamma_high`` where ``p < threshold``, else ``gamma_low``; a constant (no gradient)."""
    return torch.where(p.detach() < threshold, gamma_high, gamma_low).to(p.dtype)


def _flsd53_args(gamma_low: float, gamma_high: float, threshold: float) -> tuple[float, float, float]:
    return (check_nonnegative(gamma_low, "gamma_low"), check_nonnegative(gamma_high, "gamma_high"),
            _check_unit(threshold, "threshold"))


@full_precision
def flsd53_loss(logits: ArrayLike, targets: ArrayLike, gamma_low: float = 3.0, gamma_high: float = 5.0,
                threshold: float = 0.2, reduction: Reduction = "mean", *, weight: ArrayLike | None = None,
                ignore_index: int = IGNORE_INDEX) -> Tensor:
    """FLSD-53: focal loss with a sample-dependent γ (Lin et al. 2024, §5 and App. 11, who credit it to
    the NeurIPS version of Mukhoti et al. 2020).

    ``γ_i = gamma_high if p̂_{i,y} < threshold else gamma_low`` (5 below 0.2, else 3), chosen
    from the true-class probability; γ is a constant (no gradient flows through the choice).

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    args = _flsd53_args(gamma_low, gamma_high, threshold)

    def hard(lp: Tensor, y: Tensor) -> Tensor:
        ce = _ce(lp, y)
        return _focal_core(lp, y, _flsd53_gamma((-ce).exp(), *args), ce)

    def each(lp: Tensor, x: Tensor) -> Tensor:
        return -lp * (_flsd53_gamma(lp.exp(), *args) * _u._log_rest_all(lp)).exp()

    return per_sample_loss(rows, hard, each, weight, reduction,
                           lambda x, y: weighted_ce(x, y, flsd53_weight(args)))


@full_precision
def dual_focal_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 5.0, reduction: Reduction = "mean", *,
                    weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Dual focal loss ``L = −(1 − p̂_y + p̂_j)^γ log p̂_y`` (Tao et al. 2023; Lin et al. 2024, Eq. 5).

    ``p̂_j`` is the largest probability strictly below ``p̂_y`` (0 if none): see
    :func:`calib.losses.uncertainty.u_dfl`. Gradient flows through ``p̂_y`` and ``p̂_j``.
    γ = 5 in Lin et al. (2024). With probability targets the rival of every class is
    found by an ``(M, K, K)`` comparison.

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    gamma = check_gamma(gamma, rows.x.shape[0])

    def hard(lp: Tensor, y: Tensor) -> Tensor:
        ce = _ce(lp, y)
        return ce * _u._log_u_dfl(lp, y, gamma, ce).exp()

    return per_sample_loss(rows, hard, lambda lp, x: -lp * _u._log_u_dfl_all(lp, gamma).exp(), weight, reduction,
                           lambda x, y: _fused(x, y, gamma, dual_focal_weight, rival=True))


@full_precision
def inverse_focal_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 2.0, reduction: Reduction = "mean",
                       *, weight: ArrayLike | None = None, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Inverse focal loss ``L = −(1 + p̂_y)^γ log p̂_y`` (Wang et al. (2021), §5.2, Eq. 4).

    The weight *grows* with confidence: easy samples count more, the opposite of focal loss.

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    gamma = check_gamma(gamma, rows.x.shape[0])
    g = _u._per_row(gamma, rows.x)

    def hard(lp: Tensor, y: Tensor) -> Tensor:
        ce = _ce(lp, y)
        return ce * (gamma * torch.log1p((-ce).exp())).exp()

    return per_sample_loss(rows, hard, lambda lp, x: -lp * (g * torch.log1p(lp.exp())).exp(), weight, reduction,
                           lambda x, y: _fused(x, y, gamma, inverse_focal_weight))


@full_precision
def bsce_loss(logits: ArrayLike, targets: ArrayLike, gamma: Gamma = 4.0, norm: float = 2.0,
              reduction: Reduction = "mean", *, weight: ArrayLike | None = None,
              ignore_index: int = IGNORE_INDEX) -> Tensor:
    """BSCE, loss-weighted: ``L = ‖p̂ − y‖_β^γ · CE`` (Lin et al. (2024), §4.3, Uncertainty-CE with u_gBS).

    ``norm`` is the order β, ``gamma`` the exponent γ. The gradient flows through the weight.

    {conventions}
    """
    rows = prepare(logits, targets, reduction, ignore_index)
    gamma, norm = check_gamma(gamma, rows.x.shape[0]), _u._check_norm(norm)

    def hard(lp: Tensor, y: Tensor) -> Tensor:
        ce = _ce(lp, y)
        return ce * _u._log_u_gbs(lp, y, gamma, norm, ce=ce).exp()

    return per_sample_loss(rows, hard, lambda lp, x: -lp * _u._log_u_gbs_all(lp, gamma, norm).exp(), weight,
                           reduction, (lambda x, y: _fused(x, y, gamma, brier_weight, brier=True)) if norm == 2 else None)
