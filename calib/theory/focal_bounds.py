"""Focal-loss lower bounds beyond Bernoulli: every ``gamma >= 0`` and the true-class bound.

The entropy bound of Mukhoti et al. (2020, App. A), ``L_f >= L_CE - gamma H(p)``, goes
through Bernoulli's inequality and so needs ``gamma >= 1`` (:mod:`calib.theory`). This
module proves it for every ``gamma >= 0`` by another route, for a one-hot target with
true-class probability ``p = p_y``::

    1 - (1 - p)^gamma <= -gamma log(1 - p)   (e^x >= 1 + x at x = gamma log(1 - p))
    L_f = -(1 - p)^gamma log p >= -log p - gamma log p log(1 - p)
    log p log(1 - p) <= h2(p) = -p log p - (1 - p) log(1 - p)
    h2(p_y) <= H(p)                          (grouping the non-true classes)

so ``L_f >= L_CE - gamma h2(p_y) >= L_CE - gamma H(p)`` for all ``gamma >= 0``. It also
holds the tighter *true-class* bound mentioned by Mukhoti et al. (2020):
``L_f >= L_CE - gamma (-p_y log p_y)`` for ``gamma >= 1`` (Bernoulli alone, before the
Hoelder step), whose regulariser ``-p log p`` peaks at ``p = 1/e``.
"""
from __future__ import annotations

import numpy as np
import sympy as sp
import torch

from .._checks import ArrayLike
from ._derivation import Derivation, _check_distribution, _check_gamma, _check_unit

__all__ = [
    "exp_inequality_proof",
    "log_product_bound_proof",
    "log_product_gap",
    "binary_entropy",
    "true_class_regulariser_peak",
    "focal_bounds_one_hot",
]


def exp_inequality_proof() -> Derivation:
    """``1 - (1 - p)^gamma <= -gamma log(1 - p)`` for every ``gamma >= 0``, ``p in [0, 1)``.

    With ``x = gamma log(1 - p)``, ``(1 - p)^gamma = e^x`` and the claim is ``e^x >= 1 + x``.
    sympy: the gap ``e^x - 1 - x`` vanishes at its only critical point ``x = 0`` (step
    ``critical_points``) and its second derivative ``e^x`` is positive, so 0 is its
    minimum. Step ``rewritten`` checks that the inequality in ``p`` is this one in ``x``.
    """
    x = sp.Symbol("x", real=True)
    p = sp.Symbol("p", positive=True)
    gamma = sp.Symbol("gamma", nonnegative=True)
    gap = sp.exp(x) - 1 - x
    lhs_minus_rhs = (1 - p) ** gamma - 1 - gamma * sp.log(1 - p)  # >= 0 is the claim
    a = sp.Symbol("a", positive=True)  # a = 1 - p > 0
    rewritten = sp.simplify((lhs_minus_rhs - gap.subs(x, gamma * sp.log(1 - p))).subs(p, 1 - a))
    return Derivation(
        "1 - (1 - p)^gamma <= -gamma log(1 - p) for gamma >= 0",
        {
            "gap": gap,
            "critical_points": sp.FiniteSet(*sp.solve(sp.diff(gap, x), x)),
            "gap_at_0": gap.subs(x, 0),
            "curvature": sp.diff(gap, x, 2),
            "curvature_positive": sp.sympify(bool(sp.diff(gap, x, 2).is_positive)),
            "rewritten": rewritten,
        },
    )


def log_product_bound_proof() -> Derivation:
    """``log p log(1 - p) <= h2(p)`` on ``(0, 1)``: the sympy steps of the proof.

    Write ``a = -log p``, ``b = -log(1 - p)``; the claim is ``ab <= p a + (1 - p) b``, i.e.
    ``a (b - p) <= (1 - p) b``. Both sides are symmetric under ``p <-> 1 - p``, so take
    ``p <= 1/2``. (i) ``b - p <= p^2 / (2 (1 - p))``: the difference ``s(p)`` vanishes at
    0 and its derivative simplifies to ``p^2 / (2 (1 - p)^2) >= 0`` (step
    ``series_slope``). (ii) Hence ``a (b - p) <= a p^2 / (2(1 - p))``, and with ``b >= p``
    it suffices that ``-p log p <= 2 (1 - p)^2``: the left side is at most ``1/e`` (its
    maximum, step ``plogp_max_at``), the right side at least ``1/2`` for ``p <= 1/2``.
    """
    p = sp.Symbol("p", positive=True)
    b = -sp.log(1 - p)
    s = p**2 / (2 * (1 - p)) - (b - p)
    plogp = -p * sp.log(p)
    return Derivation(
        "log p log(1 - p) <= h2(p)",
        {
            "series_gap": s,
            "series_gap_at_0": sp.limit(s, p, 0),
            "series_slope": sp.factor(sp.simplify(sp.diff(s, p))),
            "plogp_max_at": sp.FiniteSet(*sp.solve(sp.diff(plogp, p), p)),
            "plogp_max": sp.simplify(plogp.subs(p, sp.exp(-1))),
            "rhs_min_on_half": (2 * (1 - p) ** 2).subs(p, sp.Rational(1, 2)),
        },
    )


def log_product_gap(p: ArrayLike) -> np.ndarray:
    """``h2(p) - log p log(1 - p)`` on a grid in ``(0, 1)``: non-negative (the lemma above)."""
    ps = _check_unit(p, "p", open_interval=True)
    return binary_entropy(ps) - np.log(ps) * np.log1p(-ps)


def binary_entropy(p: ArrayLike) -> np.ndarray:
    """``h2(p) = -p log p - (1 - p) log(1 - p)`` (natural log, ``0 log 0 = 0``)."""
    ps = _check_unit(p, "p")
    with np.errstate(divide="ignore", invalid="ignore"):
        return -(np.where(ps > 0, ps * np.log(ps), 0.0) + np.where(ps < 1, (1 - ps) * np.log1p(-ps), 0.0))


def true_class_regulariser_peak() -> Derivation:
    """The regulariser ``r(p) = -p log p`` of the true-class bound peaks at ``p = 1/e``.

    ``r'(p) = -log p - 1`` vanishes at ``p = 1/e`` and ``r''(p) = -1/p < 0``; ``r(1/e) = 1/e``.
    """
    p = sp.Symbol("p", positive=True)
    r = -p * sp.log(p)
    return Derivation(
        "Peak of -p log p",
        {
            "regulariser": r,
            "slope": sp.diff(r, p),
            "argmax": sp.FiniteSet(*sp.solve(sp.diff(r, p), p)),
            "curvature": sp.diff(r, p, 2),
            "max_value": sp.simplify(r.subs(p, sp.exp(-1))),
        },
    )


def focal_bounds_one_hot(probs: ArrayLike, labels: ArrayLike, gamma: float) -> dict[str, torch.Tensor]:
    """Every lower bound on focal loss with a one-hot target, per row (float64 ``(N,)``).

    With ``p = p_y`` the true-class probability and ``H`` the entropy of the row::

        focal       = -(1 - p)^gamma log p
        true_class  = L_CE - gamma (-p log p)          (Bernoulli; valid for gamma >= 1)
        log_product = L_CE - gamma log p log(1 - p)    (e^x >= 1 + x; every gamma >= 0)
        binary      = L_CE - gamma h2(p)               (lemma; every gamma >= 0)
        entropy     = L_CE - gamma H(probs)            (grouping; every gamma >= 0)

    For every ``gamma >= 0``: ``focal >= log_product >= binary >= entropy``; for
    ``gamma >= 1`` also ``focal >= true_class >= entropy`` (the gap of the last step,
    ``holder_slack = sum_{k != y} -p_k log p_k``, is what the Hoelder step of Mukhoti et
    al. (2020, App. A) gives away). ``probs`` must be strictly positive.
    """
    pt = _check_distribution(probs, "probs", positive=True)
    y = torch.as_tensor(labels)
    from .._checks import check_labels

    y = check_labels(y, pt.shape[0], pt.shape[1], "labels")
    g = _check_gamma(gamma)
    p = pt[torch.arange(pt.shape[0]), y]
    ce = -p.log()
    plogp = -p * p.log()
    h_all = -(pt * pt.log()).sum(1)
    h2 = plogp - (1 - p) * torch.log1p(-p).nan_to_num(neginf=0.0)
    log_product = (p.log() * torch.log1p(-p)).nan_to_num(nan=0.0)
    return {
        "focal": (1 - p) ** g * ce,
        "true_class": ce - g * plogp,
        "log_product": ce - g * log_product,
        "binary": ce - g * h2,
        "entropy": ce - g * h_all,
        "cross_entropy": ce,
        "holder_slack": h_all - plogp,
    }
