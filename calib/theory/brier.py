"""The Brier identity ``E_y||p - y||^2 = ||p - eta||^2 + sum_k eta_k (1 - eta_k)`` (Lin et al. 2024,
Eq. 12 and App. 8). Decompositions and proper scoring rules are in :mod:`calib.theory.scoring`."""
from __future__ import annotations

from typing import Sequence

import sympy as sp
import torch

from .._checks import ArrayLike, check_positive_int
from ._derivation import Derivation, _check_distribution


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
    splits into reliability plus grouping loss (:func:`calib.theory.scoring.known_posterior_decomposition`);
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
