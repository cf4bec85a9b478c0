"""Focal loss as entropy regularisation (Mukhoti et al. 2020, App. A; student report 2021, Thm 2).

Bernoulli's inequality, the bound chain ``L_f >= L_CE - gamma H(p) = KL(q||p) + H(q) - gamma H(p)``
(a heuristic motivation: a lower bound does not locate the minimiser) and the exact binary
optimum of Mukhoti et al. (2020, Fig. A.1), which is the evidence that focal loss prefers
less confident predictions for non-degenerate targets."""
from __future__ import annotations

import numpy as np
import sympy as sp
import torch
from scipy import optimize

from .._checks import ArrayLike
from ._derivation import Derivation, _check_distribution, _check_gamma, _check_unit


def bernoulli_inequality_proof() -> Derivation:
    """Bernoulli's inequality ``(1 - p)^gamma >= 1 - gamma p`` for ``gamma >= 1``, ``p in [0, 1]``.

    The first step of the focal entropy bound (Mukhoti et al. 2020, App. A; student report 2021, Thm 2, Eq. 4). Proof by
    sympy: the gap ``d(p) = (1-p)^gamma - (1 - gamma p)`` and its derivative vanish at
    ``p = 0``, and ``d''(p) = gamma (gamma - 1) (1 - p)^(gamma - 2) >= 0``. Writing
    ``gamma = 1 + m`` (``m >= 0``) and ``p = 1 - a`` (``a > 0``), sympy's assumption
    system decides the sign of ``d''`` by itself (step ``curvature_nonnegative``). So
    ``d'`` is non-decreasing from 0, hence non-negative, hence ``d`` is non-decreasing from
    0, hence non-negative on ``[0, 1)``, and at ``p = 1`` by continuity.
    """
    p, gamma = sp.symbols("p gamma", real=True)
    a = sp.Symbol("a", positive=True)
    m = sp.Symbol("m", nonnegative=True)
    gap = (1 - p) ** gamma - (1 - gamma * p)
    slope = sp.diff(gap, p)
    curvature = sp.diff(gap, p, 2)
    curvature_sub = sp.simplify(curvature.subs(gamma, 1 + m).subs(p, 1 - a))
    return Derivation(
        "Bernoulli's inequality (Mukhoti et al. 2020, App. A, student report 2021, Thm 2)",
        {
            "gap": gap,
            "gap_at_0": gap.subs(p, 0),
            "slope": slope,
            "slope_at_0": sp.simplify(slope.subs(p, 0)),
            "curvature": curvature,
            "curvature_substituted": curvature_sub,
            "curvature_nonnegative": sp.sympify(bool(curvature_sub.is_nonnegative)),
        },
    )


def bernoulli_gap(p: ArrayLike, gamma: float) -> np.ndarray:
    """``(1 - p)^gamma - (1 - gamma p)`` on a grid: non-negative for ``gamma >= 1`` (Bernoulli)."""
    arr = _check_unit(p, "p")
    g = _check_gamma(gamma)
    return (1.0 - arr) ** g - (1.0 - g * arr)


def entropy(probs: ArrayLike) -> torch.Tensor:
    """Shannon entropy ``H(p) = -sum_k p_k log p_k`` of each row (``0 log 0 = 0``), float64."""
    p = _check_distribution(probs, "probs")
    return -torch.special.xlogy(p, p).sum(dim=1)


def kl_divergence(q: ArrayLike, p: ArrayLike) -> torch.Tensor:
    """``KL(q || p) = sum_k q_k log(q_k / p_k)`` of each row, float64; ``p`` must be positive."""
    qt = _check_distribution(q, "q")
    pt = _check_distribution(p, "p", positive=True)
    if qt.shape != pt.shape:
        raise ValueError(f"q and p must have the same shape, got {tuple(qt.shape)} and {tuple(pt.shape)}")
    return (torch.special.xlogy(qt, qt) - torch.special.xlogy(qt, pt)).sum(dim=1)


def focal_bound_chain(q: ArrayLike, p: ArrayLike, gamma: float) -> dict[str, torch.Tensor]:
    """Each line of the focal entropy bound (Mukhoti et al. 2020, App. A; student report 2021, Thm 2, Eqs. 3-8), per row.

    With target distribution ``q``, prediction ``p`` (strictly positive) and ``gamma >= 1``::

        focal     = -sum (1 - p)^gamma q log p   (focal loss, soft target)
        bernoulli = -sum (1 - gamma p) q log p   (Bernoulli, gamma >= 1)
                  = L_CE - gamma sum q |p log p|
        holder    = L_CE - gamma max_j q_j sum |p log p|
                                     (Hoelder, ||fg||_1 <= ||f||_inf ||g||_1)
        entropy   = L_CE - gamma H(p)            (max_j q_j <= 1)
        kl_form   = KL(q || p) + H(q) - gamma H(p)   (L_CE = KL + H(q))

    and ``focal >= bernoulli >= holder >= entropy == kl_form``. Returns float64 ``(N,)``
    tensors keyed by those names, plus ``cross_entropy``.
    """
    qt = _check_distribution(q, "q")
    pt = _check_distribution(p, "p", positive=True)
    if qt.shape != pt.shape:
        raise ValueError(f"q and p must have the same shape, got {tuple(qt.shape)} and {tuple(pt.shape)}")
    g = _check_gamma(gamma, minimum=1.0)
    log_p = pt.log()
    ce = -(qt * log_p).sum(1)
    h_p = -(pt * log_p).sum(1)
    h_q = -torch.special.xlogy(qt, qt).sum(1)
    return {
        "focal": -((1 - pt) ** g * qt * log_p).sum(1),
        "bernoulli": -((1 - g * pt) * qt * log_p).sum(1),
        "holder": ce - g * qt.max(1).values * h_p,
        "entropy": ce - g * h_p,
        "kl_form": kl_divergence(qt, pt) + h_q - g * h_p,
        "cross_entropy": ce,
    }


def binary_focal_objective(x: ArrayLike, q: float, gamma: float) -> np.ndarray:
    """The binary focal objective of Mukhoti et al. 2020, App. A, Fig. A.1.

    ``F(x) = -(1 - x)^gamma q log x - x^gamma (1 - q) log(1 - x)`` for ``x in (0, 1)``: the
    focal loss of predicting ``x`` for class 1 when the label is class 1 with probability
    ``q``. ``gamma = 0`` is the expected cross-entropy.
    """
    xs = _check_unit(x, "x", open_interval=True)
    qv = float(_check_unit(q, "q"))
    g = _check_gamma(gamma)
    return -((1 - xs) ** g) * qv * np.log(xs) - xs**g * (1 - qv) * np.log1p(-xs)


def binary_focal_stationarity() -> Derivation:
    """sympy: ``dF/dx`` for the binary focal objective, and its root ``x = q`` at ``gamma = 0``."""
    x, q = sp.symbols("x q", positive=True)
    gamma = sp.Symbol("gamma", nonnegative=True)
    objective = -((1 - x) ** gamma) * q * sp.log(x) - x**gamma * (1 - q) * sp.log(1 - x)
    d_obj = sp.diff(objective, x)
    ce_roots = sp.solve(sp.Eq(sp.simplify(d_obj.subs(gamma, 0)), 0), x)
    return Derivation(
        "Binary focal optimum (Mukhoti et al. 2020, App. A, Fig. A.1)",
        {"objective": objective, "derivative": d_obj, "cross_entropy_roots": sp.FiniteSet(*ce_roots)},
    )


def binary_focal_optimum(q: ArrayLike, gamma: float) -> np.ndarray:
    """``argmin_x F(x)`` of :func:`binary_focal_objective` for each ``q`` (Mukhoti et al. 2020, Fig. A.1).

    ``F`` has a single minimum on ``(0, 1)`` (checked on a fine grid in the tests); it is
    found with a bounded scalar minimiser. ``q`` may be an array; values in ``[0, 1]``.
    """
    qs = _check_unit(q, "q")
    g = _check_gamma(gamma)
    eps = 1e-12
    out = np.empty_like(qs)
    for i, qv in np.ndenumerate(qs):
        if qv <= 0.0 or qv >= 1.0:
            out[i] = qv  # degenerate targets: the loss is minimised at the boundary
            continue
        res = optimize.minimize_scalar(
            lambda x: float(binary_focal_objective(x, qv, g)),
            bounds=(eps, 1 - eps),
            method="bounded",
            options={"xatol": 1e-12},
        )
        out[i] = res.x
    return out
