"""Sample-wise uncertainty weights u(p̂, y): the factor that focal-type losses put on CE.

Lin et al. (2024, "Uncertainty weighted gradients for model calibration", §4) writes
focal loss, dual focal loss and its own BSCE as one family, *Uncertainty-CE*,
``L = u(p̂, y) · CE`` (Lin et al. 2024, Eq. 6), and the gradient-weighted family *Uncertainty-GRA*,
``∇L = u(p̂, y) · ∇CE`` with ``u`` held constant (Lin et al. 2024, §4.2, Eq. 9-10). The weights are

* ``u_FL  = (1 − p_y)^γ``                      focal loss (Lin et al. 2024, Eq. 7; Mukhoti et al. 2020, §3),
* ``u_DFL = (1 − p_y + p_j)^γ``                dual focal loss (Lin et al. 2024, Eq. 8; Tao et al. 2023),
* ``u_gBS = ‖p̂ − y‖_β^γ``                      generalised Brier score (Lin et al. 2024, Eq. 11),

with ``y`` the one-hot label, ``p_y`` the true-class probability and ``p_j`` the largest
probability *strictly below* ``p_y`` (0 when there is none; the convention of Tao et al.'s
reference code, see :func:`u_dfl`). ``β`` is the order of the norm and ``γ`` its exponent.
u_gBS contains the other two (Lin et al. 2024, §4.3): with β = 1 and only the true class counted,
``‖p̂ − y‖_1 = 1 − p_y`` gives u_FL; with β = 1 on the true class and ``p_j`` it gives u_DFL;
with β = γ = 2 it is the Brier score. ``support=`` selects these cases.

Each weight has two entry points:

* ``u_fl(probs, targets, gamma)`` etc. take probabilities and compute in probability
  space, exactly as the equations read (``1 − p_y`` is formed as the sum of the other
  probabilities, which keeps its digits when ``p_y`` is close to 1);
* ``log_u_fl(log_probs, targets, gamma)`` etc. take log-probabilities
  (``log_softmax(logits)``) and return ``log u`` computed in log space. Their values and
  gradients stay finite for logits up to ±1e4 and for ``p_y → 1`` with ``0 < γ < 1``
  (where ``(1 − p)^γ`` has an infinite derivative at p = 1). :mod:`calib.losses` uses these.
"""
from __future__ import annotations

from typing import Union

import torch
from torch import Tensor

from .._checks import ArrayLike, NonFiniteError, check_labels, check_matrix, check_nonnegative, check_probs, reads_values

__all__ = [
    "SUPPORTS",
    "check_gamma",
    "log_u_dfl",
    "log_u_fl",
    "log_u_gbs",
    "u_dfl",
    "u_fl",
    "u_gbs",
]

Gamma = Union[float, Tensor]
SUPPORTS = ("all", "true", "true_and_rival")
_NEG_INF = float("-inf")


# --------------------------------------------------------------------------- validation
def check_gamma(gamma: Gamma, n: int, name: str = "gamma") -> Gamma:
    """A non-negative exponent: a number, or a floating tensor of shape ``(n,)`` (one per sample).

    A tensor keeps its autograd graph (gamma-Net, Wang & Golebiowski 2024, §4.1, differentiates through it).
    """
    if isinstance(gamma, Tensor):
        if not gamma.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got dtype {gamma.dtype}")
        if gamma.ndim != 0 and tuple(gamma.shape) != (n,):
            raise ValueError(
                f"{name} must be a number or a tensor of shape (N,) = ({n},), got shape {tuple(gamma.shape)}"
            )
        g = gamma.detach()
        if not reads_values(g):  # a per-sample gamma on a GPU: no host sync per step
            return gamma
        if not bool(torch.isfinite(g).all()):
            raise NonFiniteError(f"{name} contains NaN or inf values")
        if bool((g < 0).any()):
            raise ValueError(f"{name} must be >= 0, got a minimum of {g.min().item():.4g}")
        return gamma
    return check_nonnegative(gamma, name)


def _check_norm(norm: float) -> float:
    value = check_nonnegative(norm, "norm")
    if value == 0:
        raise ValueError("norm (the order beta of the norm) must be > 0, got 0")
    return value


def _check_support(support: str) -> str:
    if support not in SUPPORTS:
        raise ValueError(f"support must be one of {', '.join(SUPPORTS)}, got {support!r}")
    return support


def _check_log_probs(log_probs: ArrayLike, targets: ArrayLike) -> tuple[Tensor, Tensor]:
    lp = check_matrix(log_probs, "log_probs")
    if bool((lp > 1e-4).any()):
        raise ValueError("log_probs must be <= 0 (pass log_softmax(logits), not logits or probabilities)")
    return lp, check_labels(targets, lp.shape[0], lp.shape[1], "targets")


def _check_probs(probs: ArrayLike, targets: ArrayLike) -> tuple[Tensor, Tensor]:
    p = check_probs(probs, "probs")
    return p, check_labels(targets, p.shape[0], p.shape[1], "targets")


def _as_exponent(gamma: Gamma, like: Tensor) -> Gamma:
    """A tensor gamma on the dtype and device of ``like`` (a float stays a float).

    A per-sample gamma from a network (gamma-Net) may sit on another device than the
    logits; ``.to`` keeps its autograd graph.
    """
    return gamma.to(device=like.device, dtype=like.dtype) if isinstance(gamma, Tensor) else gamma


def _times(gamma: Gamma, log_x: Tensor) -> Tensor:
    """``gamma * log_x`` with ``0 · log 0 = 0`` for a scalar gamma of 0 (so that u = x^0 = 1)."""
    if isinstance(gamma, Tensor):
        return gamma * log_x
    return log_x * gamma if gamma != 0 else torch.zeros_like(log_x)


# --------------------------------------------------------------------------- log-space core
def _log_rest(lp: Tensor, y: Tensor) -> Tensor:
    """``log(1 − p_y) = log Σ_{k≠y} p_k``: accurate when p_y → 1, finite for finite logits."""
    return torch.logsumexp(lp.scatter(1, y[:, None], _NEG_INF), dim=1)


class _RestOfCE(torch.autograd.Function):
    """``log(1 − p_y)`` as a function of ``ce = −log p_y``: the value passed in, the derivative
    ``d log(1 − e^{−ce}) / d ce = p_y / (1 − p_y)``.

    The value comes from :func:`_log_rest` on detached log-probabilities (accurate as
    ``p_y → 1``, where ``1 − e^{−ce}`` loses every digit). Its gradient in the logits is
    ``p_y/(1 − p_y) · ∇CE`` (a function of ``p_y`` alone), so a loss built on it back-propagates
    through CE's own ``(N, K)`` pass and ``(N,)`` work. The backward calls this function
    again, so second derivatives (gamma-Net's hypergradient) are exact too.
    """

    @staticmethod
    def forward(ce: Tensor, log_rest: Tensor) -> Tensor:
        return log_rest.clone()

    @staticmethod
    def setup_context(ctx: object, inputs: tuple[Tensor, Tensor], output: Tensor) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: object, grad: Tensor) -> tuple[Tensor, None]:
        ce, log_rest = ctx.saved_tensors
        ratio = torch.exp(-ce - _RestOfCE.apply(ce, log_rest))  # p_y / (1 − p_y)
        # a zero upstream gradient stays zero where the ratio overflows (p_y rounds to 1)
        return torch.where(grad == 0, torch.zeros_like(grad), grad * ratio), None


def _log_rest_of_ce(lp: Tensor, y: Tensor, ce: Tensor) -> Tensor:
    """:func:`_log_rest` (the same value) with its gradient routed through ``ce = −lp_y``."""
    with torch.no_grad():
        value = _log_rest(lp.detach(), y)
    return _RestOfCE.apply(ce, value) if ce.requires_grad else value


def _log_rival(lp: Tensor, y: Tensor) -> Tensor:
    """``log p_j``, p_j the largest probability strictly below p_y; ``−inf`` when there is none."""
    lp_y = lp.gather(1, y[:, None])
    return lp.masked_fill(lp >= lp_y, _NEG_INF).amax(dim=1)


def _rest_term(lp: Tensor, y: Tensor, ce: Tensor | None) -> Tensor:
    """``log(1 − p_y)``; given ``ce = −lp_y`` (with autograd) its gradient goes through it."""
    return _log_rest(lp, y) if ce is None else _log_rest_of_ce(lp, y, ce)


def _log_gap(lp: Tensor, y: Tensor, support: str, ce: Tensor | None = None) -> Tensor:
    """``log |p̂_k − y_k|`` for each class, ``−inf`` outside ``support``."""
    gap = lp.scatter(1, y[:, None], _rest_term(lp, y, ce)[:, None])
    if support == "all":
        return gap
    keep = torch.zeros_like(lp, dtype=torch.bool).scatter(1, y[:, None], True)
    if support == "true_and_rival":
        lp_y = lp.gather(1, y[:, None])
        below = lp.masked_fill(lp >= lp_y, _NEG_INF)
        rival = below.argmax(dim=1, keepdim=True)
        has_rival = torch.isfinite(below.gather(1, rival))
        keep = keep | torch.zeros_like(keep).scatter(1, rival, has_rival)
    return gap.masked_fill(~keep, _NEG_INF)


# ``ce`` (optional): the per-row cross-entropy ``−lp_y`` the loss multiplies by; passing it
# routes the gradient of ``log(1 − p_y)`` through it (see :class:`_RestOfCE`), same values.
def _log_u_fl(lp: Tensor, y: Tensor, gamma: Gamma, ce: Tensor | None = None) -> Tensor:
    return _times(_as_exponent(gamma, lp), _rest_term(lp, y, ce))


def _log_u_dfl(lp: Tensor, y: Tensor, gamma: Gamma, ce: Tensor | None = None) -> Tensor:
    return _times(_as_exponent(gamma, lp), torch.logaddexp(_rest_term(lp, y, ce), _log_rival(lp, y)))


def _log_u_gbs(lp: Tensor, y: Tensor, gamma: Gamma, norm: float, support: str = "all",
               ce: Tensor | None = None) -> Tensor:
    log_sum = torch.logsumexp(norm * _log_gap(lp, y, support, ce), dim=1)  # log Σ_k |p̂_k − y_k|^β
    return _times(_as_exponent(gamma, lp), log_sum / norm)


# --------------------------------------------------------------------------- every class as the label
# ``(M, K)`` matrices: the weight each row would get if class k were its label, for
# probability targets (``Σ_k q_k u_k CE_k``). Only the largest probability of a row can
# be close to 1 (every other is at most 1/2), so ``log(1 − p_k)`` is taken by ``log1p``
# for the others and by the accurate ``logsumexp`` of :func:`_log_rest` for the top class.
def _log_rest_all(lp: Tensor) -> Tensor:
    """``log(1 − p_k)`` for every class k, ``(M, K)``."""
    top = lp.argmax(dim=1)
    rest = torch.log1p(-lp.exp().clamp(max=0.5))  # exact wherever k is not the top class
    return rest.scatter(1, top[:, None], _log_rest(lp, top)[:, None])


def _log_rival_all(lp: Tensor) -> Tensor:
    """``log p_j(k)``, the largest probability strictly below ``p_k``, for every k (``−inf`` if none).

    An ``(M, K, K)`` comparison: the one weight whose cost grows with K² per row.
    """
    below = lp[:, None, :].expand(-1, lp.shape[1], -1)
    return below.masked_fill(below >= lp[:, :, None], _NEG_INF).amax(dim=2)


def _per_row(gamma: Gamma, like: Tensor) -> Gamma:
    """A per-sample ``(M,)`` gamma as a column, to scale an ``(M, K)`` matrix."""
    g = _as_exponent(gamma, like)
    return g[:, None] if isinstance(g, Tensor) and g.ndim == 1 else g


def _log_u_fl_all(lp: Tensor, gamma: Gamma) -> Tensor:
    return _times(_per_row(gamma, lp), _log_rest_all(lp))


def _log_u_dfl_all(lp: Tensor, gamma: Gamma) -> Tensor:
    return _times(_per_row(gamma, lp), torch.logaddexp(_log_rest_all(lp), _log_rival_all(lp)))


def _log_u_gbs_all(lp: Tensor, gamma: Gamma, norm: float) -> Tensor:
    """``(γ/β) log(Σ_{m≠k} p_m^β + (1 − p_k)^β)`` for every k (support "all")."""
    powered = norm * lp
    total = torch.logsumexp(powered, dim=1, keepdim=True)
    top = lp.argmax(dim=1)
    # Σ_{m≠k} p_m^β = total − p_k^β: exact by log1p for all but the top class, whose share
    # may be near 1; there the sum of the others is taken directly
    ratio = (powered - total).exp().clamp(max=0.5)
    others = (total + torch.log1p(-ratio)).scatter(
        1, top[:, None], torch.logsumexp(powered.scatter(1, top[:, None], _NEG_INF), dim=1, keepdim=True))
    log_sum = torch.logaddexp(others, norm * _log_rest_all(lp))
    return _times(_per_row(gamma, lp), log_sum / norm)


# --------------------------------------------------------------------------- public: log space
def log_u_fl(log_probs: ArrayLike, targets: ArrayLike, gamma: Gamma = 3.0) -> Tensor:
    """``log u_FL = γ · log(1 − p_y)``, from log-probabilities (Lin et al. 2024, Eq. 7; Mukhoti et al. 2020, §3).

    ``1 − p_y`` is ``Σ_{k≠y} p_k``, taken as a ``logsumexp`` of the other log-probabilities, so
    ``u_FL = exp(log_u_fl)`` and its gradient are finite even where ``p_y`` rounds to 1.
    Returns shape ``(N,)``.
    """
    lp, y = _check_log_probs(log_probs, targets)
    return _log_u_fl(lp, y, check_gamma(gamma, lp.shape[0]))


def log_u_dfl(log_probs: ArrayLike, targets: ArrayLike, gamma: Gamma = 5.0) -> Tensor:
    """``log u_DFL = γ · log(1 − p_y + p_j)``, from log-probabilities (Lin et al. 2024, Eq. 8; Tao et al. 2023).

    ``p_j`` is the largest probability strictly below ``p_y`` (0 when none); see :func:`u_dfl`.
    Returns shape ``(N,)``.
    """
    lp, y = _check_log_probs(log_probs, targets)
    return _log_u_dfl(lp, y, check_gamma(gamma, lp.shape[0]))


def log_u_gbs(
    log_probs: ArrayLike, targets: ArrayLike, gamma: Gamma = 4.0, norm: float = 2.0, support: str = "all"
) -> Tensor:
    """``log u_gBS = (γ/β) · log Σ_k |p̂_k − y_k|^β``, from log-probabilities (Lin et al. 2024, Eq. 11).

    The inner sum is a ``logsumexp`` of ``β · log|p̂_k − y_k|`` (the true-class entry is
    ``log(1 − p_y)``), so no zero is ever raised to a power. Returns shape ``(N,)``.
    """
    lp, y = _check_log_probs(log_probs, targets)
    return _log_u_gbs(lp, y, check_gamma(gamma, lp.shape[0]), _check_norm(norm), _check_support(support))


# --------------------------------------------------------------------------- public: probabilities
def _rest(p: Tensor, y: Tensor) -> Tensor:
    """``1 − p_y`` as the sum of the other probabilities (no cancellation when p_y ≈ 1)."""
    return p.scatter(1, y[:, None], 0.0).sum(dim=1)


def u_fl(probs: ArrayLike, targets: ArrayLike, gamma: Gamma = 3.0) -> Tensor:
    """Focal-loss weight ``u_FL = (1 − p_y)^γ`` (Lin et al. 2024, Eq. 7; Mukhoti et al. 2020, §3).

    Args:
        probs: ``(N, K)`` probabilities (rows sum to 1).
        targets: ``(N,)`` integer labels.
        gamma: exponent γ ≥ 0, a number or a ``(N,)`` tensor.

    Returns:
        ``(N,)`` weights in [0, 1]; γ = 0 gives 1 everywhere (CE).
    """
    p, y = _check_probs(probs, targets)
    return _rest(p, y) ** _as_exponent(check_gamma(gamma, p.shape[0]), p)


def _rival(p: Tensor, y: Tensor) -> Tensor:
    p_y = p.gather(1, y[:, None])
    return p.masked_fill(p >= p_y, 0.0).amax(dim=1)


def u_dfl(probs: ArrayLike, targets: ArrayLike, gamma: Gamma = 5.0) -> Tensor:
    """Dual-focal weight ``u_DFL = (1 − p_y + p_j)^γ`` (Lin et al. 2024, Eq. 8; Tao et al. 2023).

    ``p_j`` is the largest probability *strictly below* ``p_y``, and 0 when ``p_y`` is the
    smallest (Tao et al.'s reference code; a class tied with ``p_y`` is not below it). Lin et al.'s
    prose calls p_j "the second maximum confidence"; the two agree when the sample is
    classified correctly, and differ on misclassified samples, where the largest
    non-target probability is *above* ``p_y``.

    Returns:
        ``(N,)`` weights in [0, 1]: with ``p_j < p_y`` and ``p_j + p_y ≤ 1`` the base
        ``1 − p_y + p_j`` lies in ``[2 p_j, 1)`` (1 only where ``p_y`` underflows to 0).
    """
    p, y = _check_probs(probs, targets)
    return (_rest(p, y) + _rival(p, y)) ** _as_exponent(check_gamma(gamma, p.shape[0]), p)


def u_gbs(
    probs: ArrayLike, targets: ArrayLike, gamma: Gamma = 4.0, norm: float = 2.0, support: str = "all"
) -> Tensor:
    """Generalised Brier score ``u_gBS = ‖p̂ − y‖_β^γ = (Σ_k |p̂_k − y_k|^β)^(γ/β)`` (Lin et al. 2024, Eq. 11).

    Lin et al. (2024) print Eq. 11 as ``Σ_i ‖p̂_i − y_i‖_β^γ``; read coordinate by coordinate that is
    ``Σ_i |p̂_i − y_i|^γ``, in which β plays no role. We follow CONTRIBUTING.md's conventions (and their parity
    numbers): the β-norm of the whole vector ``p̂ − y``, raised to γ. The two readings agree
    for β = γ = 2 (the Brier score), the case Lin et al.'s analysis (Eq. 12) rests on.

    Args:
        probs: ``(N, K)`` probabilities.
        targets: ``(N,)`` integer labels.
        gamma: the exponent γ ≥ 0 (a number or a ``(N,)`` tensor).
        norm: the order β > 0 of the norm.
        support: which classes enter the norm: ``"all"`` (Lin et al. 2024, Eq. 11), ``"true"`` (only
            the true class: ``(1 − p_y)^γ`` for any β, u_FL) or ``"true_and_rival"`` (the
            true class and p_j: with β = 1 this is u_DFL). Lin et al. (2024), §4.3, name these special cases.

    Returns:
        ``(N,)`` weights. β = γ = 2 with ``support="all"`` is the Brier score of each sample.
    """
    p, y = _check_probs(probs, targets)
    gamma = _as_exponent(check_gamma(gamma, p.shape[0]), p)
    norm, support = _check_norm(norm), _check_support(support)
    gap = p.scatter(1, y[:, None], _rest(p, y)[:, None])  # |p̂_k − y_k|
    if support != "all":
        keep = torch.zeros_like(p, dtype=torch.bool).scatter(1, y[:, None], True)
        if support == "true_and_rival":
            below = p.masked_fill(p >= p.gather(1, y[:, None]), 0.0)
            rival = below.argmax(dim=1, keepdim=True)
            keep = keep | torch.zeros_like(keep).scatter(1, rival, below.gather(1, rival) > 0)
        gap = gap.masked_fill(~keep, 0.0)
    return (gap**norm).sum(dim=1) ** (gamma / norm)
