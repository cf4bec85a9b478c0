"""Proper scoring rules and the decompositions of the Brier score.

Three results, each derived by sympy and checked numerically:

* **Murphy / DeGroot-Fienberg.** For a forecast with finitely many distinct values
  ``f_g`` (weights ``w_g``, label frequencies ``obar_g`` within each value, overall
  frequencies ``obar``): ``BS = reliability - resolution + uncertainty`` (Murphy 1973),
  and ``BS = calibration + refinement`` with ``refinement = uncertainty - resolution``
  (DeGroot & Fienberg 1983). The sample version is
  :func:`calib.metrics.brier_decomposition`.
* **Reliability + grouping loss.** With the true posterior ``eta`` known and
  ``c = E[y | p] = E[eta | p]`` the calibration map: ``E||p - eta||^2 = E||p - c||^2 +
  E||c - eta||^2`` (Kull & Flach 2015; Perez-Lebel et al. 2023). The first term is the
  reliability (calibration), the second the grouping loss. So ``||p - eta||^2`` (Lin et
  al. 2024, Eq. 12) is *not* calibration error: the constant forecast ``E[eta]`` is
  calibrated and still far from ``eta``.
* **Properness.** A score ``S(q, y)`` is strictly proper when ``E_{y~eta} S(q, y)`` has
  its unique minimum at ``q = eta``. CE and Brier are; focal loss is not (Charoenphakdee
  et al. 2021), which is what Mukhoti et al. (2020, Fig. A.1) plot.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import sympy as sp
import torch
from scipy import optimize

from .._checks import ArrayLike, check_positive_int
from ._derivation import Derivation, _check_distribution, _check_gamma

__all__ = [
    "murphy_decomposition_proof",
    "grouping_decomposition_proof",
    "known_posterior_decomposition",
    "strict_properness_proof",
    "SCORES",
    "expected_score",
    "expected_score_minimiser",
]


# --------------------------------------------------------------------------- Murphy


def murphy_decomposition_proof(num_values: int = 2, num_classes: int = 2) -> Derivation:
    """``BS = REL - RES + UNC`` for a forecast with ``num_values`` distinct vectors.

    Symbols: weights ``w_g`` (summing to 1), forecasts ``f_gk``, within-group label
    frequencies ``o_gk`` (each row summing to 1). The Brier score is
    ``sum_g w_g sum_j o_gj ||f_g - e_j||^2`` (group ``g`` has label ``j`` a fraction
    ``o_gj`` of the time); ``obar_k = sum_g w_g o_gk``. Step ``residual`` (Brier minus
    ``REL - RES + UNC``, constraints substituted, expanded) must be 0; so must
    ``residual_calibration_refinement`` (DeGroot-Fienberg form).
    """
    m = check_positive_int(num_values, "num_values")
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    w = list(sp.symbols(f"w_1:{m + 1}", nonnegative=True))
    f = [list(sp.symbols(f"f_{g + 1}_1:{K + 1}", real=True)) for g in range(m)]
    o = [list(sp.symbols(f"o_{g + 1}_1:{K + 1}", nonnegative=True)) for g in range(m)]
    constraints = {w[-1]: 1 - sum(w[:-1])}
    for g in range(m):
        constraints[o[g][-1]] = 1 - sum(o[g][:-1])
    brier = sum(
        w[g] * sum(o[g][j] * sum((f[g][k] - (1 if k == j else 0)) ** 2 for k in range(K)) for j in range(K))
        for g in range(m)
    )
    obar = [sum(w[g] * o[g][k] for g in range(m)) for k in range(K)]
    rel = sum(w[g] * sum((f[g][k] - o[g][k]) ** 2 for k in range(K)) for g in range(m))
    res = sum(w[g] * sum((o[g][k] - obar[k]) ** 2 for k in range(K)) for g in range(m))
    unc = sum(ob * (1 - ob) for ob in obar)
    refinement = sum(w[g] * sum(o[g][k] * (1 - o[g][k]) for k in range(K)) for g in range(m))
    sub = lambda e: sp.expand(sp.expand(e).subs(constraints))  # noqa: E731
    return Derivation(
        f"Murphy decomposition, {m} forecast values, K = {K}",
        {
            "brier": brier,
            "reliability": rel,
            "resolution": res,
            "uncertainty": unc,
            "residual": sub(brier - (rel - res + unc)),
            "refinement_minus_unc_plus_res": sub(refinement - (unc - res)),
            "residual_calibration_refinement": sub(brier - (rel + refinement)),
        },
    )


def grouping_decomposition_proof(group_size: int = 3, num_classes: int = 2) -> Derivation:
    """``mean_n ||p - eta_n||^2 = ||p - c||^2 + mean_n ||c - eta_n||^2`` within one group.

    All ``group_size`` inputs of a group share the forecast ``p`` but have their own
    posteriors ``eta_n`` (equal weights); ``c = mean_n eta_n = E[eta | p] = E[y | p]`` is
    the calibration map there. The cross term ``2 (p - c) . mean_n (c - eta_n)``
    vanishes because ``c`` is the mean; step ``residual`` must be 0. Averaging over
    groups gives ``E||p - eta||^2 = reliability + grouping loss``.
    """
    n = check_positive_int(group_size, "group_size")
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    p = sp.symbols(f"p_1:{K + 1}", real=True)
    eta = [sp.symbols(f"eta_{i + 1}_1:{K + 1}", real=True) for i in range(n)]
    c = [sum(eta[i][k] for i in range(n)) / n for k in range(K)]
    distance = sum(sum((p[k] - eta[i][k]) ** 2 for k in range(K)) for i in range(n)) / n
    reliability = sum((p[k] - c[k]) ** 2 for k in range(K))
    grouping = sum(sum((c[k] - eta[i][k]) ** 2 for k in range(K)) for i in range(n)) / n
    return Derivation(
        f"Distance to eta = reliability + grouping loss ({n} inputs, K = {K})",
        {
            "distance_to_eta": distance,
            "reliability": reliability,
            "grouping_loss": grouping,
            "residual": sp.expand(distance - reliability - grouping),
        },
    )


def known_posterior_decomposition(probs: ArrayLike, eta: ArrayLike, n_bins: int | None = None) -> dict[str, float]:
    """All terms of the Brier score when the true posterior ``eta`` is known.

    Groups the forecasts like :func:`calib.metrics.forecast_groups`. With ``n_bins=None``
    the forecast is ``probs`` itself; with ``n_bins`` it is *coarsened*: every row is
    replaced by the mean of its grid cell, a forecast with finitely many values (the
    ``forecast`` entry). In both cases, with ``c_g`` the mean of ``eta`` over group ``g``::

        distance    = mean ||forecast - eta||^2  = reliability + grouping   (exact)
        reliability = mean ||forecast - c||^2
        grouping    = mean ||c - eta||^2
        irreducible = mean sum_k eta_k (1 - eta_k)
        expected_brier = E_{y~eta} mean ||forecast - y||^2 = distance + irreducible

    Returns floats and the float64 ``forecast`` tensor.
    """
    from ..metrics import forecast_groups

    p = _check_distribution(probs, "probs")
    e = _check_distribution(eta, "eta")
    if p.shape != e.shape:
        raise ValueError(f"eta must have the shape of probs {tuple(p.shape)}, got {tuple(e.shape)}")
    inverse, counts = forecast_groups(p, n_bins)
    cnt = counts.to(torch.float64)[:, None]
    forecast = (torch.zeros(len(counts), p.shape[1], dtype=torch.float64).index_add_(0, inverse, p) / cnt)[inverse]
    c = (torch.zeros(len(counts), p.shape[1], dtype=torch.float64).index_add_(0, inverse, e) / cnt)[inverse]
    distance = float((forecast - e).pow(2).sum(1).mean())
    irreducible = float((e * (1 - e)).sum(1).mean())
    return {
        "distance": distance,
        "reliability": float((forecast - c).pow(2).sum(1).mean()),
        "grouping": float((c - e).pow(2).sum(1).mean()),
        "irreducible": irreducible,
        "expected_brier": distance + irreducible,
        "forecast": forecast,
    }


# --------------------------------------------------------------------------- properness


def strict_properness_proof(num_classes: int = 3) -> Derivation:
    """CE and the Brier score are strictly proper; sympy, for a fixed ``K``.

    Brier: ``E_{y~eta}||q - y||^2 - ||q - eta||^2`` does not depend on ``q`` (step
    ``brier_minus_distance`` is free of ``q``), so the unique minimiser is ``q = eta``.
    CE: ``E_{y~eta}[-log q_y] - H(eta) = KL(eta || q)`` (step ``ce_minus_kl_minus_entropy``
    is 0), and ``KL >= 0`` with equality only at ``q = eta`` (Gibbs); the Lagrangian on the
    simplex has the single stationary point ``q = eta`` (step ``ce_stationary``).
    """
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    q = sp.symbols(f"q_1:{K + 1}", positive=True)
    eta = sp.symbols(f"eta_1:{K + 1}", positive=True)
    mu = sp.Symbol("mu", real=True)
    sub = {eta[-1]: 1 - sum(eta[:-1])}
    brier = sum(eta[j] * sum((q[k] - (1 if k == j else 0)) ** 2 for k in range(K)) for j in range(K))
    distance = sum((q[k] - eta[k]) ** 2 for k in range(K))
    brier_rest = sp.expand((brier - distance).subs(sub))
    ce = -sum(e * sp.log(qi) for e, qi in zip(eta, q))
    kl = sum(e * (sp.log(e) - sp.log(qi)) for e, qi in zip(eta, q))
    h = -sum(e * sp.log(e) for e in eta)
    lag = ce + mu * (sum(q) - 1)
    sol = sp.solve([sp.diff(lag, qi) for qi in q] + [sum(q) - 1], list(q) + [mu], dict=True)
    if len(sol) != 1:
        raise RuntimeError(f"expected one stationary point of the CE Lagrangian, got {len(sol)}")
    residual = [sp.simplify(sol[0][qi].subs(sub) - e.subs(sub)) for qi, e in zip(q, eta)]
    return Derivation(
        f"CE and Brier are strictly proper (K = {K})",
        {
            "brier_minus_distance": brier_rest,
            "brier_rest_has_q": sp.sympify(any(brier_rest.has(qi) for qi in q)),
            "ce_minus_kl_minus_entropy": sp.expand(sp.expand_log(ce - kl - h, force=True)),
            "ce_stationary": sp.Dict({qi: sol[0][qi] for qi in q}),
            "ce_stationary_minus_eta": sp.Tuple(*residual),
        },
    )


def _ce(q: torch.Tensor, k: int, **_: float) -> torch.Tensor:
    return -q[k].log()


def _brier(q: torch.Tensor, k: int, **_: float) -> torch.Tensor:
    return (q - torch.nn.functional.one_hot(torch.tensor(k), q.shape[0]).to(q)).pow(2).sum()


def _focal(q: torch.Tensor, k: int, gamma: float = 3.0) -> torch.Tensor:
    return -((1 - q[k]) ** gamma) * q[k].log()


#: Scores ``S(q, k)`` of a prediction ``q`` and label ``k``, by name.
SCORES: dict[str, Callable[..., torch.Tensor]] = {"ce": _ce, "brier": _brier, "focal": _focal}


def _score(name: str) -> Callable[..., torch.Tensor]:
    if not isinstance(name, str):
        raise TypeError(f"score must be a str, got {type(name).__name__}")
    if name not in SCORES:
        raise ValueError(f"score must be one of {sorted(SCORES)}, got {name!r}")
    return SCORES[name]


def expected_score(score: str, q: ArrayLike, eta: ArrayLike, **kwargs: float) -> float:
    """``E_{y~eta} S(q, y) = sum_k eta_k S(q, k)`` for one prediction ``q`` (float64)."""
    fn = _score(score)
    qt = _check_distribution(q, "q", positive=True)[0]
    et = _check_distribution(eta, "eta")[0]
    if qt.shape != et.shape:
        raise ValueError(f"q and eta must have the same shape, got {tuple(qt.shape)} and {tuple(et.shape)}")
    if "gamma" in kwargs:
        _check_gamma(kwargs["gamma"])
    return float(sum(float(et[k]) * fn(qt, k, **kwargs) for k in range(qt.shape[0])))


def expected_score_minimiser(score: str, eta: ArrayLike, **kwargs: float) -> torch.Tensor:
    """``argmin_q E_{y~eta} S(q, y)`` over the open simplex (float64 ``(K,)``).

    Minimised over logits (last pinned to 0) with BFGS from ``log eta`` and from the
    uniform point; the better of the two is returned. For a strictly proper score it is
    ``eta``; for focal loss with ``K = 2`` it is Mukhoti et al. (2020) Fig. A.1's optimum
    (:func:`calib.theory.binary_focal_optimum`).
    """
    fn = _score(score)
    et = _check_distribution(eta, "eta", positive=True)[0]
    if "gamma" in kwargs:
        _check_gamma(kwargs["gamma"])
    K = et.shape[0]

    def objective(free: np.ndarray) -> tuple[float, np.ndarray]:
        z = torch.cat([torch.as_tensor(free, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)])
        z.requires_grad_(True)
        q = torch.softmax(z, 0)
        val = sum(et[k] * fn(q, k, **kwargs) for k in range(K))
        (grad,) = torch.autograd.grad(val, z)
        return float(val.detach()), grad[:-1].numpy()

    best = None
    for x0 in ((et.log() - et.log()[-1])[:-1].numpy(), np.zeros(K - 1)):
        res = optimize.minimize(objective, x0, jac=True, method="BFGS", options={"gtol": 1e-12})
        if best is None or res.fun < best.fun:
            best = res
    z = torch.cat([torch.as_tensor(best.x, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)])
    return torch.softmax(z, 0)
