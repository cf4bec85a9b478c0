"""The gradient factor ``g(p, gamma)`` (Lin et al. 2024, §4.1): its peak, its ``g = 1`` crossing, and
the Lambert-W rule for the sample-dependent gamma (Wang & Golebiowski 2024) behind FLSD-53
(Lin et al. 2024, §5, App. 11)."""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np
import sympy as sp
import torch
from scipy import optimize, special

from .._checks import ArrayLike, as_tensor, check_labels
from ._derivation import Derivation, _check_gamma, _check_unit, _symbols_by_name


def gradient_factor_derivation() -> Derivation:
    """``g(p, gamma)`` by sympy: ``dL_FL/dp`` divided by ``dL_CE/dp`` (Lin et al. 2024, §4.1, Fig. 1).

    With ``L_FL = -(1 - p)^gamma log p`` and ``L_CE = -log p`` (``p`` the true-class
    probability), both losses depend on the weights only through ``p``, so the chain rule
    gives ``dL_FL/dw = g(p, gamma) dL_CE/dw`` with ``g = (dL_FL/dp) / (dL_CE/dp)``. The
    step ``difference`` compares sympy's ratio with the paper's closed form
    ``(1-p)^gamma - gamma p (1-p)^(gamma-1) log p`` and must simplify to 0.
    Also returned: ``slope = dg/dp`` and the exact peak for ``gamma = 1`` (``exp(-2)``).
    """
    p = sp.Symbol("p", positive=True)
    gamma = sp.Symbol("gamma", positive=True)
    focal = -((1 - p) ** gamma) * sp.log(p)
    ce = -sp.log(p)
    ratio = sp.diff(focal, p) / sp.diff(ce, p)
    derived = sp.factor(sp.powsimp(sp.expand(ratio)))
    paper = (1 - p) ** gamma - gamma * p * (1 - p) ** (gamma - 1) * sp.log(p)
    # (1-p)^gamma and (1-p)^(gamma-1) share a base: divide it out so powsimp can cancel.
    difference = sp.simplify(sp.powsimp(sp.expand((ratio - paper) / (1 - p) ** (gamma - 1))))
    slope = sp.diff(derived, p)
    peak_gamma1 = sp.solve(sp.Eq(sp.diff(derived.subs(gamma, 1), p), 0), p)
    return Derivation(
        "Gradient factor g(p, gamma) (Lin et al. 2024, §4.1)",
        {
            "focal_loss": focal,
            "cross_entropy": ce,
            "dfocal_dp": sp.diff(focal, p),
            "dce_dp": sp.diff(ce, p),
            "g_derived": derived,
            "g_paper": paper,
            "difference": difference,
            "slope": sp.simplify(slope),
            "peak_gamma_1": sp.FiniteSet(*peak_gamma1),
        },
    )


@lru_cache(maxsize=1)
def _slope_numeric() -> Callable[[np.ndarray, float], np.ndarray]:
    d = gradient_factor_derivation()
    sym = _symbols_by_name(d["slope"])
    return sp.lambdify((sym["p"], sym["gamma"]), d["slope"], modules="numpy")


def gradient_factor(p: ArrayLike, gamma: float) -> np.ndarray:
    """``g(p, gamma) = (1 - p)^gamma - gamma p (1 - p)^(gamma - 1) log p`` (Lin et al. 2024, §4.1).

    The factor by which focal loss rescales the cross-entropy gradient of a sample whose
    true-class probability is ``p``. Evaluated with ``0 log 0 = 0`` so ``g(0) = 1``;
    ``tests/test_theory.py`` checks it against sympy's derivation and against autograd.
    """
    ps = _check_unit(p, "p")
    g = _check_gamma(gamma)
    if g < 1 and np.any(ps >= 1):
        raise ValueError("p = 1 needs gamma >= 1 ((1 - p)^(gamma - 1) is infinite there)")
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = np.where(ps < 1, (1 - ps) ** (g - 1), 1.0 if g == 1 else 0.0)
    return (1 - ps) ** g - g * special.xlogy(ps, ps) * tail


def gradient_factor_slope(p: ArrayLike, gamma: float) -> np.ndarray:
    """``dg/dp`` at ``p in (0, 1)``, evaluated from sympy's derivative (lambdified)."""
    ps = _check_unit(p, "p", open_interval=True)
    g = _check_gamma(gamma)
    return np.asarray(_slope_numeric()(ps, g), dtype=np.float64) * np.ones_like(ps)


def gradient_factor_peak(gamma: float) -> float:
    """``p_star(gamma) = argmax_p g(p, gamma)``: the root of ``dg/dp`` (Lin et al. 2024, §4.1).

    ``g`` rises on ``[0, p_star]`` and falls on ``[p_star, 1]`` (checked on a grid of
    ``gamma`` in ``(0, 30]`` in the tests). ``dg/dp -> +inf`` as ``p -> 0``; it is
    negative at ``p = 1/2`` for ``gamma >= 1/2``, and for smaller ``gamma`` at some
    ``p = 1 - 10^-k``, so the root is bracketed. ``gamma`` must be > 0 (``g = 1`` at 0).
    """
    g = _check_gamma(gamma)
    if g <= 0:
        raise ValueError("gamma must be > 0 (g is identically 1 at gamma = 0)")
    f = lambda x: float(gradient_factor_slope(x, g))  # noqa: E731
    upper = 0.5
    for k in range(1, 15):
        if f(upper) < 0:
            break
        upper = 1 - 10.0**-k
    else:
        raise RuntimeError(f"no sign change of dg/dp found for gamma = {g}")
    return float(optimize.brentq(f, 1e-12, upper, xtol=1e-15, rtol=1e-14))


def gradient_factor_unit_crossing(gamma: float) -> float:
    """The ``p > p_star`` where ``g(p, gamma) = 1``: above it, focal loss pushes less than CE."""
    g = _check_gamma(gamma)
    if g <= 0:
        raise ValueError("gamma must be > 0 (g is identically 1 at gamma = 0)")
    p0 = gradient_factor_peak(g)
    f = lambda x: float(gradient_factor(x, g)) - 1.0  # noqa: E731
    return float(optimize.brentq(f, p0, 1 - 1e-12, xtol=1e-15, rtol=1e-14))


def true_logit_push_peak(gamma: float) -> float:
    """``argmax_p g(p, gamma) (1 - p)``: where focal loss pushes the true logit hardest.

    ``-dL_FL/dz_y = g(p, gamma) (1 - p)`` (CE: ``1 - p``); it peaks at a smaller ``p``
    than ``g`` itself (:func:`gradient_factor_peak`). Bounded scalar maximisation on
    ``[0, p_star]`` (beyond ``p_star`` both factors fall).
    """
    g = _check_gamma(gamma)
    if g <= 0:
        raise ValueError("gamma must be > 0 (for gamma = 0 the push 1 - p peaks at p = 0)")
    hi = gradient_factor_peak(g)
    res = optimize.minimize_scalar(lambda x: -float(gradient_factor([x], g)[0]) * (1 - x), bounds=(0.0, hi),
                                   method="bounded", options={"xatol": 1e-12})
    return float(res.x)


def gradient_ratio(
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    reference_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    logits: ArrayLike,
    targets: ArrayLike,
) -> torch.Tensor:
    """Elementwise ratio of autograd gradients w.r.t. the logits, float64 ``(N, K)``.

    ``loss_fn(logits, targets)`` and ``reference_fn(logits, targets)`` must return the
    *sum* over samples (or per-sample values, which are summed), so row ``i`` holds
    ``d loss_i / d z_i`` divided by ``d ref_i / d z_i``. For focal vs cross-entropy every
    entry of row ``i`` equals ``g(p_{i,y_i}, gamma)`` (Lin et al. 2024, §4.1); for a gradient-weighted
    loss vs cross-entropy it equals the detached weight ``u_i`` (Lin et al. 2024, Eq. 9).
    """
    z = as_tensor(logits, "logits").to(torch.float64)
    if z.ndim != 2 or z.shape[0] == 0 or z.shape[1] < 2:
        raise ValueError(f"logits must have shape (N, K) with N >= 1, K >= 2, got {tuple(z.shape)}")
    if not bool(torch.isfinite(z).all()):
        raise ValueError("logits contains NaN or inf values")
    y = check_labels(targets, z.shape[0], z.shape[1], "targets")
    grads = []
    for fn in (loss_fn, reference_fn):
        zz = z.detach().clone().requires_grad_(True)
        fn(zz, y).sum().backward()
        grads.append(zz.grad)
    return grads[0] / grads[1]


def lambert_gamma_derivation() -> Derivation:
    """A Lambert-W schedule for focal loss's gamma, reconstructed by us.

    Wang & Golebiowski (2024, §3.2) credit a Lambert-W rule to the NeurIPS version of Mukhoti
    et al. (2020); the workshop version in our seeds has neither it nor FLSD-53, which comes
    from Lin et al. (2024, §5, App. 11).

    FLSD picks, for a threshold ``p0``, the ``gamma`` at which the focal gradient of a sample
    with true-class probability ``p0`` equals the CE gradient: ``g(p0, gamma) = 1``. Then
    ``g > 1`` for ``p < p0`` (focal pushes harder than CE) and ``g < 1`` above (it pushes
    less). Steps, each checked by sympy:

    1. ``g(p0, gamma) = 1`` factors as ``u (1-p0)^(gamma-1) = 1`` with
       ``u = 1 - p0 - gamma p0 log p0``; solve ``u`` for gamma.
    2. With ``a = 1 - p0`` and ``c = log a / (p0 log p0)`` the exponent becomes
       ``(gamma - 1) log a = c (a - u) - log a``, so ``u e^{c (a - u)} / a = 1``.
    3. sympy solves that with ``LambertW``; sympy returns the principal branch, which gives
       ``u = a``, i.e. the trivial root ``gamma = 0`` (``g(p, 0) = 1`` for every ``p``).
       The schedule is the other real branch, ``k = -1``.
    """
    p0 = sp.Symbol("p_0", positive=True)
    gamma, u = sp.symbols("gamma u", real=True)
    a, c = sp.symbols("a c", positive=True)
    g_expr = gradient_factor_derivation()["g_paper"]
    sym = _symbols_by_name(g_expr)
    equation = sp.Eq(g_expr.subs({sym["p"]: p0, sym["gamma"]: gamma}), 1)
    u_def = 1 - p0 - gamma * p0 * sp.log(p0)
    factored = u * (1 - p0) ** (gamma - 1)
    factor_check = sp.simplify(sp.powsimp(sp.expand((equation.lhs - factored.subs(u, u_def)) / (1 - p0) ** (gamma - 1))))
    gamma_of_u = sp.solve(sp.Eq(u, u_def), gamma)[0]
    exponent_check = sp.simplify(
        ((gamma_of_u - 1) * sp.log(1 - p0) - (c * (a - u) - sp.log(a))).subs({a: 1 - p0, c: sp.log(1 - p0) / (p0 * sp.log(p0))})
    )
    reduced = sp.Eq(u * sp.exp(c * (a - u)) / a, 1)
    u_principal = sp.solve(reduced, u)
    k = sp.Symbol("k", integer=True)
    u_branch = u_principal[0].replace(sp.LambertW, lambda arg, *rest: sp.LambertW(arg, k))
    gamma_branch = gamma_of_u.subs(u, u_branch).subs({a: 1 - p0, c: sp.log(1 - p0) / (p0 * sp.log(p0))})
    return Derivation(
        "Lambert-W schedule: g(p0, gamma) = 1 (reconstructed)",
        {
            "equation": equation,
            "u_definition": sp.Eq(u, u_def),
            "factor_check": factor_check,
            "gamma_of_u": sp.Eq(gamma, gamma_of_u),
            "exponent_check": exponent_check,
            "reduced_equation": reduced,
            "u_principal_branch": sp.Eq(u, u_principal[0]),
            "gamma_branch_k": sp.Eq(gamma, gamma_branch),
        },
    )


@lru_cache(maxsize=1)
def _lambert_gamma_expr() -> tuple[sp.Symbol, sp.Symbol, sp.Expr]:
    expr = lambert_gamma_derivation()["gamma_branch_k"].rhs
    sym = _symbols_by_name(expr)
    return sym["p_0"], sym["k"], expr


def lambert_gamma(p0: ArrayLike, *, branch: int = -1, exact: bool = False) -> np.ndarray:
    """``gamma`` solving ``g(p0, gamma) = 1``: the Lambert-W schedule (our reconstruction, see
    :func:`lambert_gamma_derivation`).

    ``gamma = (z + W_k(-z e^{-z})) / log(1 - p0)`` with
    ``z = (1 - p0) log(1 - p0) / (p0 log p0)``; ``k = -1`` is the non-trivial branch
    (``k = 0`` returns the trivial root ``gamma = 0``). Real for ``p0 in (0, 1/2)``, where
    ``z < 1``; it grows without bound as ``p0 -> 0`` and tends to 0 as ``p0 -> 1/2``.
    ``exact=True`` evaluates sympy's closed form (:func:`lambert_gamma_derivation`) with
    mpmath instead of the scipy expression below; the tests check that both agree.
    """
    ps = _check_unit(p0, "p0", open_interval=True)
    if np.any(ps >= 0.5):
        raise ValueError("p0 must lie in (0, 1/2): for p0 >= 1/2 no gamma > 0 gives g(p0, gamma) = 1")
    if branch not in (0, -1):
        raise ValueError(f"branch must be 0 or -1, got {branch}")
    if exact:
        sym_p0, k, expr = _lambert_gamma_expr()
        vals = [float(sp.re(sp.N(expr.subs({sym_p0: sp.Float(v, 30), k: branch}), 20))) for v in ps.ravel()]
        return np.asarray(vals, dtype=np.float64).reshape(ps.shape)
    z = (1 - ps) * np.log1p(-ps) / (ps * np.log(ps))
    w = special.lambertw(-z * np.exp(-z), k=branch)
    return np.real(z + w) / np.log1p(-ps)


def flsd53_gamma(p: ArrayLike) -> np.ndarray:
    """The FLSD-53 rule (Mukhoti et al. 2020, the NeurIPS version; restated in Lin et al. 2024, App. 11): ``gamma = 5`` if ``p < 0.2`` else ``3``."""
    ps = _check_unit(p, "p")
    return np.where(ps < 0.2, 5.0, 3.0)
