"""The derivations of the book, done by sympy and checked by numbers.

Every result a chapter states is produced here, symbolically where sympy can do the
algebra and numerically where it cannot, so the chapters *show* the objects and
``tests/test_theory.py`` *checks* them. A result is never typed in where sympy can
derive it: formulas quoted from a paper appear only as the thing a derivation is
compared against.

Sections (papers by author and year, as in the book):

* Focal loss as entropy regularisation (Mukhoti et al. 2020, App. A, student report 2021, Thm 2): Bernoulli's inequality,
  the bound chain ``L_f >= L_CE - gamma H(p) = KL(q||p) + H(q) - gamma H(p)``, and the
  binary optimum of Mukhoti et al. 2020, Fig. A.1.
* The gradient factor ``g(p, gamma)`` (Lin et al. 2024, §4.1), its peak ``p0``, the ``g = 1``
  crossing, and the Lambert-W schedule behind FLSD-53.
* The Brier identity (Lin et al. 2024, Eq. 12 and App. 8). Its decompositions (Murphy; reliability +
  grouping loss) and proper scoring rules are in :mod:`calib.scoring`; focal bounds for
  every ``gamma >= 0`` in :mod:`calib.focal_bounds`; the GRA update field (curl,
  stability, inverse map) in :mod:`calib.gra_field`.
* The BSCE-GRA optimum (Lin et al. 2024, App. 9) and the fixed point of gradient weighting when the
  weight uses the one-hot label.
* student report 2021, Theorem 1 (scaling logits by ``t > 1`` sharpens the top probability) and Wang et al. 2021, Eq. (1)
  (label smoothing is CE plus a CE against the uniform distribution).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np
import sympy as sp
import torch
from scipy import optimize, special

from ._checks import ArrayLike, as_tensor, check_labels, check_nonnegative, check_positive_int, check_probs

__all__ = [
    "Derivation",
    # focal loss as entropy regularisation
    "bernoulli_inequality_proof",
    "bernoulli_gap",
    "entropy",
    "kl_divergence",
    "focal_bound_chain",
    "binary_focal_objective",
    "binary_focal_stationarity",
    "binary_focal_optimum",
    # gradient factor
    "gradient_factor_derivation",
    "gradient_factor",
    "gradient_factor_slope",
    "gradient_factor_peak",
    "gradient_factor_unit_crossing",
    "true_logit_push_peak",
    "gradient_ratio",
    "lambert_gamma_derivation",
    "lambert_gamma",
    "flsd53_gamma",
    # Brier identity
    "brier_identity",
    "brier_identity_coordinate",
    "brier_identity_indexed",
    "expected_brier",
    "brier_decomposition",
    "monte_carlo_brier",
    # BSCE-GRA optimum
    "paper_lagrangian_optimum",
    "gra_fixed_point_derivation",
    "binary_gra_fixed_point_derivation",
    "gra_weight",
    "gra_label_weights",
    "gra_fixed_point",
    "fit_constant_logits",
    "fit_linear_logits",
    "simplex_slice",
    # student report 2021, Theorem 1, Wang et al. 2021, Eq. (1)
    "temperature_sharpening_proof",
    "top_probability",
    "label_smoothing_identity",
]

WeightFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# --------------------------------------------------------------------------- display


@dataclass(frozen=True)
class Derivation:
    """An ordered chain of named sympy objects, displayed as aligned LaTeX in a notebook.

    ``steps`` maps a short name to an expression (or equation, or boolean); index the
    derivation like a dict. The test suite asserts on the named steps.
    """

    title: str
    steps: dict[str, sp.Basic] = field(default_factory=dict)

    def __getitem__(self, name: str) -> sp.Basic:
        return self.steps[name]

    def __contains__(self, name: object) -> bool:
        return name in self.steps

    def _repr_latex_(self) -> str:
        lines = [rf"\text{{{name.replace('_', ' ')}}}: &\quad {sp.latex(expr)}" for name, expr in self.steps.items()]
        return "$$\\begin{aligned}" + r" \\ ".join(lines) + "\\end{aligned}$$"

    def __str__(self) -> str:
        body = "\n".join(f"  {name}: {expr}" for name, expr in self.steps.items())
        return f"{self.title}\n{body}"


# --------------------------------------------------------------------------- validation


def _symbols_by_name(expr: sp.Basic) -> dict[str, sp.Symbol]:
    return {s.name: s for s in expr.free_symbols}


def _check_gamma(gamma: float, name: str = "gamma", minimum: float = 0.0) -> float:
    value = check_nonnegative(gamma, name)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_unit(x: ArrayLike, name: str, *, open_interval: bool = False) -> np.ndarray:
    """A finite, non-empty float64 array with values in [0, 1] (or (0, 1))."""
    arr = np.asarray(as_tensor(x, name).detach().cpu().numpy(), dtype=np.float64)
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf values")
    lo_ok = arr > 0 if open_interval else arr >= 0
    hi_ok = arr < 1 if open_interval else arr <= 1
    if not (np.all(lo_ok) and np.all(hi_ok)):
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{name} must lie in {interval}; got values in [{arr.min():.4g}, {arr.max():.4g}]")
    return arr


def _check_distribution(x: ArrayLike, name: str, *, positive: bool = False) -> torch.Tensor:
    """A float64 CPU ``(N, K)`` (or ``(K,)`` promoted) probability matrix; strictly positive if asked.

    The numerical checks of this module are small; they run on the CPU in float64.
    """
    t = as_tensor(x, name).detach().cpu()
    if t.ndim == 1:
        t = t.unsqueeze(0)
    t = check_probs(t.to(torch.float64), name, atol=1e-6)
    if positive and bool((t <= 0).any()):
        raise ValueError(f"{name} must be strictly positive (log of a zero probability is -inf)")
    return t


# =========================================================================== focal bound


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


# =========================================================================== gradient factor


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
    """The Lambert-W schedule of focal loss (Mukhoti et al. 2020, NeurIPS version §4; cited by Wang & Golebiowski 2024, §3).

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
        "Lambert-W schedule: g(p0, gamma) = 1 (Mukhoti et al. 2020)",
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
    """``gamma`` solving ``g(p0, gamma) = 1``: the Lambert-W schedule of focal loss (Mukhoti et al. 2020).

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
    """The FLSD-53 rule (Mukhoti et al. 2020; restated in Lin et al. 2024, App. 11): ``gamma = 5`` if ``p < 0.2`` else ``3``."""
    ps = _check_unit(p, "p")
    return np.where(ps < 0.2, 5.0, 3.0)


# =========================================================================== Brier identity


def _brier_sides(p: Sequence[sp.Expr], eta: Sequence[sp.Expr]) -> tuple[sp.Expr, sp.Expr]:
    K = len(p)
    expected = sum(eta[j] * sum((p[k] - (1 if k == j else 0)) ** 2 for k in range(K)) for j in range(K))
    rhs = sum((p[k] - eta[k]) ** 2 for k in range(K)) + sum(eta[k] * (1 - eta[k]) for k in range(K))
    return expected, rhs


def brier_identity(num_classes: int) -> Derivation:
    """Lin et al. 2024, Eq. 12 for a fixed ``K``: ``E_{y~eta} ||p - y||^2 = ||p - eta||^2 + sum eta_k (1 - eta_k)``.

    The expectation is written out as ``sum_j eta_j ||p - e_j||^2`` with symbols ``p_k``,
    ``eta_k``; the last ``eta_K`` is eliminated by ``sum eta = 1``. ``residual`` (expected
    minus right-hand side, expanded) must be 0. ``p`` need not be a distribution.
    """
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    p = sp.symbols(f"p_1:{K + 1}", real=True)
    eta = list(sp.symbols(f"eta_1:{K + 1}", real=True))
    expected, rhs = _brier_sides(p, eta)
    constraint = {eta[-1]: 1 - sum(eta[:-1])}
    residual = sp.expand((expected - rhs).subs(constraint))
    residual_free = sp.expand(expected - rhs)
    return Derivation(
        f"Brier identity, K = {K} (Lin et al. 2024, Eq. 12)",
        {
            "expected_brier": expected,
            "distance_plus_irreducible": rhs,
            "residual_without_constraint": residual_free,
            "residual": residual,
        },
    )


def brier_identity_coordinate() -> Derivation:
    """Lin et al. 2024, App. 8, one coordinate at a time: the proof for every ``K`` at once.

    ``y_k ~ Bernoulli(eta_k)`` marginally, so ``E (p_k - y_k)^2 = (1 - eta_k) p_k^2 +
    eta_k (p_k - 1)^2``; ``residual`` against ``(p_k - eta_k)^2 + eta_k (1 - eta_k)`` must
    expand to 0. Summing over ``k`` (expectation is linear) gives Eq. 12 for any ``K``.
    """
    p, eta = sp.symbols("p_k eta_k", real=True)
    expected = (1 - eta) * (p - 0) ** 2 + eta * (p - 1) ** 2
    rhs = (p - eta) ** 2 + eta * (1 - eta)
    return Derivation(
        "Brier identity per coordinate (Lin et al. 2024, App. 8)",
        {"expected": expected, "rhs": rhs, "residual": sp.expand(expected - rhs)},
    )


def brier_identity_indexed() -> Derivation:
    """Lin et al. 2024, Eq. 12 for symbolic ``K`` with sympy's indexed sums.

    ``E ||p - y||^2 = sum_j eta_j sum_k (p_k - delta_jk)^2``; sympy evaluates the inner
    sum with a Kronecker delta (refined under ``j <= K``), and ``residual`` minus the
    right-hand side, with ``sum_j eta_j = 1``, must simplify to 0.
    """
    K = sp.Symbol("K", integer=True, positive=True)
    j, k = sp.symbols("j k", integer=True, positive=True)
    P, E = sp.IndexedBase("p"), sp.IndexedBase("eta")
    inner = sp.Sum(sp.expand((P[k] - sp.KroneckerDelta(j, k)) ** 2), (k, 1, K)).doit()
    inner = sp.refine(sp.piecewise_fold(inner), sp.Q.le(j, K))
    expected = sp.Sum(sp.expand(E[j] * inner), (j, 1, K))
    rhs = sp.Sum((P[k] - E[k]) ** 2 + E[k] * (1 - E[k]), (k, 1, K))
    diff = sp.simplify(sp.expand(expected.doit() - rhs.doit()))
    # Rename the outer dummy j -> k in sums that do not already use k, so like sums cancel.
    diff = diff.replace(
        lambda s: isinstance(s, sp.Sum) and s.limits[0][0] == j and not s.has(k),
        lambda s: s.xreplace({j: k}),
    )
    diff = sp.simplify(diff)
    residual = sp.simplify(diff.subs({sp.Sum(E[j], (j, 1, K)): 1, sp.Sum(E[k], (k, 1, K)): 1}))
    return Derivation(
        "Brier identity, symbolic K (Lin et al. 2024, Eq. 12)",
        {"inner_sum": inner, "expected_brier": expected, "rhs": rhs, "residual": residual},
    )


def expected_brier(p: ArrayLike, eta: ArrayLike) -> torch.Tensor:
    """``E_{y~eta} ||p - y||^2 = sum_j eta_j ||p - e_j||^2`` per row, float64 (Lin et al. 2024, Eq. 12, left)."""
    pt = _check_distribution(p, "p")
    et = _check_distribution(eta, "eta")
    if pt.shape != et.shape:
        raise ValueError(f"p and eta must have the same shape, got {tuple(pt.shape)} and {tuple(et.shape)}")
    eye = torch.eye(pt.shape[1], dtype=torch.float64)
    dist = ((pt[:, None, :] - eye[None, :, :]) ** 2).sum(-1)  # (N, K): ||p - e_j||^2
    return (et * dist).sum(1)


def brier_decomposition(p: ArrayLike, eta: ArrayLike) -> dict[str, torch.Tensor]:
    """The right side of Lin et al. 2024, Eq. 12, per row: ``distance_to_eta = ||p - eta||^2`` and
    ``irreducible = sum eta (1 - eta)``.

    ``||p - eta||^2`` is the squared distance to the true posterior, *not* the calibration
    error: a constant forecast ``E[eta]`` is calibrated and still far from ``eta``. It
    splits into reliability plus grouping loss (:func:`calib.scoring.known_posterior_decomposition`);
    the Brier score of a sample splits as reliability - resolution + uncertainty
    (:func:`calib.metrics.brier_decomposition`).
    """
    pt = _check_distribution(p, "p")
    et = _check_distribution(eta, "eta")
    if pt.shape != et.shape:
        raise ValueError(f"p and eta must have the same shape, got {tuple(pt.shape)} and {tuple(et.shape)}")
    return {"distance_to_eta": ((pt - et) ** 2).sum(1), "irreducible": (et * (1 - et)).sum(1)}


def monte_carlo_brier(p: ArrayLike, eta: ArrayLike, n_samples: int, *, seed: int = 0) -> torch.Tensor:
    """Monte-Carlo estimate of ``E_{y~eta} ||p - y||^2`` per row from ``n_samples`` labels each."""
    pt = _check_distribution(p, "p")
    et = _check_distribution(eta, "eta")
    if pt.shape != et.shape:
        raise ValueError(f"p and eta must have the same shape, got {tuple(pt.shape)} and {tuple(et.shape)}")
    n = check_positive_int(n_samples, "n_samples")
    gen = torch.Generator().manual_seed(int(seed))
    labels = torch.multinomial(et, n, replacement=True, generator=gen)  # (N, n)
    onehot = torch.nn.functional.one_hot(labels, pt.shape[1]).to(torch.float64)
    return ((pt[:, None, :] - onehot) ** 2).sum(-1).mean(1)


# =========================================================================== BSCE-GRA optimum


def paper_lagrangian_optimum(num_classes: int = 3) -> Derivation:
    """Lin et al. 2024, App. 9, Eq. 18: the Lagrangian with the *detached* weight ``C = ||q - eta||^2``.

    ``L = C (-sum eta_i log q_i) + mu (sum q_i - 1)``. Treating ``C`` as a constant
    (``> 0``), sympy solves ``dL/dq_i = 0`` together with the constraint; the solution is
    ``q = eta`` (step ``solution``; ``eta_K = 1 - sum of the others``).
    """
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    q = sp.symbols(f"q_1:{K + 1}", positive=True)
    eta = list(sp.symbols(f"eta_1:{K}", positive=True))
    eta.append(1 - sum(eta))
    C, mu = sp.symbols("C mu", positive=True)
    lagrangian = C * (-sum(e * sp.log(qi) for e, qi in zip(eta, q))) + mu * (sum(q) - 1)
    equations = [sp.diff(lagrangian, qi) for qi in q] + [sum(q) - 1]
    solution = sp.solve(equations, list(q) + [mu], dict=True)
    residual = [sp.simplify(solution[0][qi] - e) for qi, e in zip(q, eta)] if len(solution) == 1 else None
    return Derivation(
        "BSCE-GRA Lagrangian with the weight ||q - eta||^2 (Lin et al. 2024, App. 9)",
        {
            "lagrangian": lagrangian,
            "stationarity": sp.Tuple(*equations),
            "solution": sp.Dict(solution[0]) if len(solution) == 1 else sp.Tuple(*[sp.Dict(s) for s in solution]),
            "q_minus_eta": sp.Tuple(*residual) if residual is not None else sp.S.NaN,
        },
    )


def gra_fixed_point_derivation(num_classes: int = 3) -> Derivation:
    """The fixed point of gradient weighting when the weight uses the one-hot label.

    The implemented loss (Lin et al. 2024, Eq. 9/14) scales the CE gradient of a sample with label ``y``
    by ``u(q, e_y)``, detached. Averaged over ``y ~ eta`` the logit gradient is
    ``G_j = sum_k eta_k w_k d(-log softmax(z)_k)/dz_j`` with ``w_k = u(q, e_k)`` held fixed.
    sympy differentiates it (step ``gradient``), and shows that it vanishes when
    ``q_k = eta_k w_k / sum_i eta_i w_i`` (step ``gradient_at_candidate`` is all zeros):
    the fixed point ``q_k ∝ eta_k u(q, e_k)``. The same follows from a Lagrangian on the
    simplex (step ``simplex_solution``). With ``u = 1`` (CE) it is ``q = eta``.
    """
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    z = sp.symbols(f"z_1:{K + 1}", real=True)
    eta = sp.symbols(f"eta_1:{K + 1}", positive=True)
    w = sp.symbols(f"w_1:{K + 1}", positive=True)
    denom = sum(sp.exp(zi) for zi in z)
    softmax = [sp.exp(zi) / denom for zi in z]
    surrogate = sum(e * wk * (-sp.log(s)) for e, wk, s in zip(eta, w, softmax))
    gradient = [sp.simplify(sp.diff(surrogate, zj)) for zj in z]
    candidate = {zi: sp.log(e * wk) for zi, e, wk in zip(z, eta, w)}
    at_candidate = [sp.simplify(gj.subs(candidate)) for gj in gradient]
    q = sp.symbols(f"q_1:{K + 1}", positive=True)
    mu = sp.Symbol("mu", positive=True)
    lag = sum(e * wk * (-sp.log(qk)) for e, wk, qk in zip(eta, w, q)) + mu * (sum(q) - 1)
    sol = sp.solve([sp.diff(lag, qk) for qk in q] + [sum(q) - 1], list(q) + [mu], dict=True)
    return Derivation(
        "Fixed point of uncertainty-weighted gradients with one-hot labels",
        {
            "expected_surrogate": surrogate,
            "gradient": sp.Tuple(*gradient),
            "candidate_logits": sp.Dict(candidate),
            "gradient_at_candidate": sp.Tuple(*at_candidate),
            "simplex_solution": sp.Dict(sol[0]),
        },
    )


def binary_gra_fixed_point_derivation() -> Derivation:
    """Binary case in closed form for ``u = ||q - e_y||_beta^gamma`` (and ``u_FL``).

    With ``K = 2``: ``u(q, e_1) = (2^(1/beta) q_2)^gamma`` and ``u(q, e_2) =
    (2^(1/beta) q_1)^gamma`` (for ``u_FL``: ``q_2^gamma`` and ``q_1^gamma``). The fixed point
    ``q_1 / q_2 = eta_1 u_1 / (eta_2 u_2)`` becomes ``(q_1/q_2)^(1 + gamma) = eta_1/eta_2``,
    which sympy solves: ``q`` is ``eta`` at temperature ``1 + gamma`` on the log-odds, so
    ``beta`` drops out and BSCE-GRA and FL-GRA share the binary fixed point.
    """
    r, e1 = sp.symbols("r eta_1", positive=True)  # r = q_1 / q_2
    gamma, beta = sp.symbols("gamma beta", positive=True)
    q1, q2 = r / (1 + r), 1 / (1 + r)
    eta2 = 1 - e1
    u1 = (2 ** (1 / beta) * q2) ** gamma
    u2 = (2 ** (1 / beta) * q1) ** gamma
    ratio_eq = sp.Eq(r, sp.powsimp(sp.simplify(e1 * u1 / (eta2 * u2)), force=True))
    solution = sp.solve(ratio_eq, r)
    q1_sol = sp.simplify(solution[0] / (1 + solution[0])) if len(solution) == 1 else sp.S.NaN
    return Derivation(
        "Binary fixed point of gBS-GRA / FL-GRA",
        {"fixed_point_equation": ratio_eq, "odds_solution": sp.FiniteSet(*solution), "q_1": q1_sol},
    )


def gra_weight(name: str, **kwargs: float) -> WeightFn:
    """A weight ``u(probs, targets) -> (N,)`` from :mod:`calib.uncertainty` by name.

    ``"ce"`` (``u = 1``), ``"fl"`` (``u_FL``, kwarg ``gamma``), ``"dfl"`` (``u_DFL``,
    ``gamma``), ``"gbs"`` (``u_gBS``, ``gamma`` and ``norm``; Lin et al. 2024, Eq. 11).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.lower()
    if key == "ce":
        if kwargs:
            raise ValueError(f"the 'ce' weight takes no parameters, got {sorted(kwargs)}")
        return lambda probs, targets: torch.ones(probs.shape[0], dtype=probs.dtype, device=probs.device)
    from . import uncertainty  # lazy: theory does not need the losses package to import

    table = {"fl": uncertainty.u_fl, "dfl": uncertainty.u_dfl, "gbs": uncertainty.u_gbs}
    if key not in table:
        raise ValueError(f"name must be one of 'ce', 'fl', 'dfl', 'gbs', got {name!r}")
    fn = table[key]
    return lambda probs, targets: fn(probs, targets, **kwargs)


def gra_label_weights(weight: WeightFn | str, q: ArrayLike, **weight_kwargs: float) -> torch.Tensor:
    """``u(q, e_k)`` for every class ``k`` (float64 ``(K,)``): the weight a sample with
    prediction ``q`` would get if its label were ``k`` (Lin et al. 2024, Eq. 9 with a one-hot label).

    ``weight`` is a callable ``u(probs, targets)`` or a name for :func:`gra_weight`.
    """
    qt = _check_distribution(q, "q")
    if qt.shape[0] != 1:
        raise ValueError(f"q must be a single distribution of shape (K,), got {tuple(qt.shape)}")
    fn = gra_weight(weight, **weight_kwargs) if isinstance(weight, str) else weight
    if not callable(fn):
        raise TypeError(f"weight must be callable or a name, got {type(weight).__name__}")
    return _weights_per_class(fn, qt[0])


def _weights_per_class(weight: WeightFn, q: torch.Tensor) -> torch.Tensor:
    K = q.shape[0]
    probs = q.unsqueeze(0).expand(K, K).contiguous()
    out = as_tensor(weight(probs, torch.arange(K)), "weight output").to(torch.float64).reshape(-1)
    if out.shape[0] != K:
        raise ValueError(f"weight must return one value per row, got shape {tuple(out.shape)} for {K} rows")
    return out


def gra_fixed_point(eta: ArrayLike, weight: WeightFn | str, *, tol: float = 1e-11, **weight_kwargs: float) -> torch.Tensor:
    """Solve ``q_k = eta_k u(q, e_k) / sum_i eta_i u(q, e_i)`` for ``q`` (float64 ``(K,)``).

    The stationary point of an uncertainty-GRA loss under label noise ``y ~ eta`` (see
    :func:`gra_fixed_point_derivation`). ``weight`` is a callable ``u(probs, targets)`` or a
    name for :func:`gra_weight` (then ``weight_kwargs`` are its parameters). Solved on the
    logits (last logit pinned to 0) with ``scipy.optimize.root`` on the log-residual
    ``log q - log(eta u / sum eta u)`` from ``log eta``, alternating with damped
    fixed-point steps when it stalls; raises ``RuntimeError`` if ``max |q - eta u / sum eta u|``
    stays above ``tol``.
    """
    et = _check_distribution(eta, "eta", positive=True)
    if et.shape[0] != 1:
        raise ValueError(f"eta must be a single distribution of shape (K,), got {tuple(et.shape)}")
    et = et[0]
    fn = gra_weight(weight, **weight_kwargs) if isinstance(weight, str) else weight
    if not callable(fn):
        raise TypeError(f"weight must be callable or a name, got {type(weight).__name__}")

    def log_residual(free: np.ndarray) -> np.ndarray:
        # log q - log(eta u / sum eta u): well scaled even where q_k is tiny.
        z = torch.cat([torch.as_tensor(free, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)])
        log_q = torch.log_softmax(z, 0)
        log_t = et.log() + _weights_per_class(fn, log_q.exp()).log()
        return (log_q - (log_t - torch.logsumexp(log_t, 0)))[:-1].numpy()

    def prob_error(free: np.ndarray) -> float:
        z = torch.cat([torch.as_tensor(free, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)])
        q = torch.softmax(z, 0)
        t = et * _weights_per_class(fn, q)
        return float((q - t / t.sum()).abs().max())

    x = (et.log() - et.log()[-1])[:-1].numpy()
    for _attempt in range(3):
        with np.errstate(all="ignore"):
            sol = optimize.root(log_residual, x, method="hybr", tol=1e-14)
        if np.all(np.isfinite(sol.x)) and prob_error(sol.x) <= tol:
            x = sol.x
            break
        for _ in range(1500):  # damped fixed-point steps in log space, then polish again
            x = x - 0.3 * log_residual(x)
    err = prob_error(x)
    if not np.isfinite(err) or err > tol:
        raise RuntimeError(f"fixed point not found (residual {err:.3g} > tol {tol:.3g})")
    z = torch.cat([torch.as_tensor(x, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)])
    return torch.softmax(z, 0)


def _check_sgd(steps: int, lr: float, momentum: float) -> tuple[int, float, float]:
    """Validated SGD settings: ``steps >= 1``, finite ``lr > 0``, ``0 <= momentum < 1``."""
    n_steps = check_positive_int(steps, "steps")
    if isinstance(lr, bool) or not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr}")
    mom = check_nonnegative(momentum, "momentum")
    if mom >= 1:
        raise ValueError(f"momentum must be < 1, got {mom}")
    return n_steps, float(lr), mom


def fit_constant_logits(
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    targets: ArrayLike,
    num_classes: int,
    *,
    steps: int = 2000,
    lr: float = 1.0,
    momentum: float = 0.9,
) -> torch.Tensor:
    """Train one free logit vector ``z`` (shared by all samples) on ``targets``; return ``softmax(z)``.

    The empirical check of a fixed point: every sample has the same input, so the model can
    only choose one distribution ``q``, and full-batch SGD with momentum on
    ``loss_fn(z.expand(N, K), targets)`` (mean reduction) drives ``q`` to the stationary
    point of the loss's *gradient* (for GRA losses the gradient is what matters; their
    value is a surrogate). Float64, CPU; a handful of parameters.
    """
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    y = as_tensor(targets, "targets")
    if y.ndim != 1 or y.shape[0] == 0:
        raise ValueError(f"targets must be a non-empty (N,) tensor of labels, got shape {tuple(y.shape)}")
    y = check_labels(y, y.shape[0], K, "targets")
    n_steps, lr, mom = _check_sgd(steps, lr, momentum)
    z = torch.zeros(K, dtype=torch.float64, device=y.device, requires_grad=True)
    opt = torch.optim.SGD([z], lr=float(lr), momentum=mom)
    for _ in range(n_steps):
        opt.zero_grad()
        loss_fn(z.unsqueeze(0).expand(y.shape[0], K), y).backward()
        opt.step()
    return torch.softmax(z.detach(), 0)


def fit_linear_logits(
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: ArrayLike,
    targets: ArrayLike,
    num_classes: int,
    *,
    steps: int = 500,
    lr: float = 0.5,
    momentum: float = 0.9,
) -> torch.nn.Linear:
    """Train a linear model ``z = W x + b`` (zero start) on ``(x, targets)``; return it (float64).

    The fixed point on data whose posterior is known (Lin et al. 2024, §4.3 toy data): for a mixture of
    two Gaussians with a shared isotropic covariance, the true log-odds
    ``log(eta_1/eta_2)`` are linear in ``x``, and so is the binary GRA fixed point
    ``log(q_1/q_2) = log(eta_1/eta_2) / (1 + gamma)`` (:func:`binary_gra_fixed_point_derivation`).
    A linear model can therefore reach the fixed point at every input at once, and
    full-batch SGD with momentum on ``loss_fn(W x + b, targets)`` (mean reduction) shows
    which one training reaches. Float64 on the CPU; ``K (dim + 1)`` parameters.
    """
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    xt = as_tensor(x, "x").detach().cpu()
    if not xt.is_floating_point():
        raise TypeError(f"x must be floating point, got dtype {xt.dtype}")
    if xt.ndim != 2 or xt.shape[0] == 0:
        raise ValueError(f"x must have shape (N, dim) with N >= 1, got shape {tuple(xt.shape)}")
    xt = xt.to(torch.float64)
    if not bool(torch.isfinite(xt).all()):
        raise ValueError("x contains NaN or inf values")
    y = check_labels(as_tensor(targets, "targets").cpu(), xt.shape[0], K, "targets")
    n_steps, lr, mom = _check_sgd(steps, lr, momentum)
    model = torch.nn.Linear(xt.shape[1], K, dtype=torch.float64)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    opt = torch.optim.SGD(model.parameters(), lr=float(lr), momentum=mom)
    for _ in range(n_steps):
        opt.zero_grad()
        loss_fn(model(xt), y).backward()
        opt.step()
    return model.requires_grad_(False)


def simplex_slice(resolution: int, *, fixed: float = 0.1, num_classes: int = 4) -> tuple[torch.Tensor, np.ndarray]:
    """Grid on a 2-D slice of the ``K``-class simplex (Lin et al. 2024, Fig. 2 uses ``K = 4``).

    Classes ``3..K-1`` hold ``fixed / (K - 3)`` each; classes 0, 1, 2 share the remaining
    mass on a triangular grid with ``resolution + 1`` points per edge. Returns float64
    probabilities ``(M, K)`` and 2-D triangle coordinates ``(M, 2)`` for plotting
    (class 0 at the bottom-left corner, 1 bottom-right, 2 top).
    """
    n = check_positive_int(resolution, "resolution")
    K = check_positive_int(num_classes, "num_classes", minimum=4)
    c = check_nonnegative(fixed, "fixed")
    if c >= 1:
        raise ValueError(f"fixed must be < 1, got {c}")
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = i + j <= n
    b1, b2 = i[keep] / n, j[keep] / n
    b0 = 1.0 - b1 - b2
    rest = np.full((b0.size, K - 3), c / (K - 3))
    probs = np.column_stack([(1 - c) * b0, (1 - c) * b1, (1 - c) * b2, rest])
    coords = np.column_stack([b1 + 0.5 * b2, b2 * math.sqrt(3) / 2])
    return torch.as_tensor(probs, dtype=torch.float64), coords


# =========================================================================== student report 2021, Thm 1, Wang et al. 2021, Eq. 1


def temperature_sharpening_proof(num_classes: int = 3) -> Derivation:
    """student report 2021, Theorem 1: for logits with ``f_1`` the largest, ``softmax(t f)_1`` grows with ``t``.

    sympy computes ``d/dt log softmax(t f)_1`` and shows it equals
    ``sum_j s_j (f_1 - f_j)`` (``s = softmax(t f)``; step ``difference`` is 0). Writing
    ``f_j = f_1 - d_j`` with ``d_j >= 0``, sympy's assumptions decide that the derivative
    is non-negative (step ``derivative_nonnegative``); so for ``t > 1`` the top probability
    is at least its value at ``t = 1``. Also checked: the student report's own rewriting with ``t = 1 + s``.
    """
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    f = sp.symbols(f"f_1:{K + 1}", real=True)
    t, s = sp.symbols("t s", positive=True)
    d = sp.symbols(f"d_2:{K + 1}", nonnegative=True)
    denom = sum(sp.exp(t * fj) for fj in f)
    top = sp.exp(t * f[0]) / denom
    dlog = sp.diff(sp.log(top), t)
    weights = [sp.exp(t * fj) / denom for fj in f]
    claimed = sum(wj * (f[0] - fj) for wj, fj in zip(weights, f))
    difference = sp.simplify(dlog - claimed)
    gaps = {f[j]: f[0] - d[j - 1] for j in range(1, K)}
    dlog_gaps = sp.simplify(dlog.subs(gaps))
    rewrite = sp.exp(f[0]) / sum(sp.exp(fj) * sp.exp(s * (fj - f[0])) for fj in f)
    rewrite_check = sp.simplify(top.subs(t, 1 + s) - rewrite)
    return Derivation(
        "student report 2021, Theorem 1: scaling logits by t > 1 raises the top probability",
        {
            "top_probability": top,
            "dlog_dt": sp.simplify(dlog),
            "difference": difference,
            "dlog_dt_with_gaps": dlog_gaps,
            "derivative_nonnegative": sp.sympify(bool(dlog_gaps.is_nonnegative)),
            "rewrite_check": rewrite_check,
        },
    )


def top_probability(logits: ArrayLike, t: float | ArrayLike = 1.0) -> torch.Tensor:
    """``max_k softmax(t z)_k`` per row (student report 2021, Thm 1; ``t = 1/T`` in temperature scaling)."""
    z = as_tensor(logits, "logits").to(torch.float64)
    if z.ndim != 2 or z.shape[0] == 0 or z.shape[1] < 2:
        raise ValueError(f"logits must have shape (N, K) with N >= 1, K >= 2, got {tuple(z.shape)}")
    if not bool(torch.isfinite(z).all()):
        raise ValueError("logits contains NaN or inf values")
    tt = as_tensor(t, "t").to(torch.float64)
    if not bool(torch.isfinite(tt).all()) or bool((tt <= 0).any()):
        raise ValueError("t must be finite and > 0")
    if tt.ndim == 1:
        tt = tt.unsqueeze(1)
    return torch.softmax(tt * z, dim=-1).max(-1).values


def label_smoothing_identity(num_classes: int = 3) -> Derivation:
    """Wang et al. 2021, Eq. (1): ``CE(y_tilde, f) = (1 - eps) CE(y, f) + eps CE(u, f)``, ``y_tilde = (1-eps) y + eps/K``.

    CE is linear in its target, so the identity holds for any target vector ``y``;
    ``residual`` must expand to 0. ``conventions`` solves for the Mukhoti et al. 2020 smoothing strength
    ``alpha`` (``s = (1 - alpha) y + alpha (1 - y)/(K - 1)``) that gives the same soft
    label as Wang et al.'s ``eps``: ``alpha = eps (K - 1) / K``.
    """
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    eps, alpha = sp.symbols("epsilon alpha", positive=True)
    y = sp.symbols(f"y_1:{K + 1}", real=True)
    logf = sp.symbols(f"ell_1:{K + 1}", real=True)  # ell_k = log f_k

    def ce(target: Sequence[sp.Expr]) -> sp.Expr:
        return -sum(tk * lk for tk, lk in zip(target, logf))

    smooth = [(1 - eps) * yk + eps / K for yk in y]
    uniform = [sp.Rational(1, K)] * K
    lhs = ce(smooth)
    rhs = (1 - eps) * ce(y) + eps * ce(uniform)
    onehot = [1] + [0] * (K - 1)
    s_003 = [(1 - eps) * yk + eps / K for yk in onehot]
    s_004 = [(1 - alpha) * yk + alpha * (1 - yk) / (K - 1) for yk in onehot]
    alpha_sol = sp.solve(sp.Eq(s_004[1], s_003[1]), alpha)
    agree = [sp.simplify(a.subs(alpha, alpha_sol[0]) - b) for a, b in zip(s_004, s_003)]
    return Derivation(
        "Wang et al. 2021, Eq. (1): label smoothing = (1 - eps) CE + eps CE(uniform)",
        {
            "smoothed_ce": lhs,
            "decomposed": rhs,
            "residual": sp.expand(lhs - rhs),
            "alpha_for_eps": sp.FiniteSet(*alpha_sol),
            "conventions_agree": sp.Tuple(*agree),
        },
    )
