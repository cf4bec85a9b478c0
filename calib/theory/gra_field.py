"""The expected update field of uncertainty-weighted gradients (GRA), and what it is not.

Averaged over labels ``y ~ eta`` at one input, the GRA logit update of Lin et al. (2024,
Eq. 9) with a detached weight ``u`` is the vector field

    G(z) = sum_k eta_k u(q, e_k) (q - e_k),      q = softmax(z),

whose zeros are the fixed points ``q_k ∝ eta_k u(q, e_k)`` of
:func:`calib.theory.gra_fixed_point`. This module asks what kind of object ``G`` is:

* For ``K = 2`` it is a gradient (every field of one variable is). For ``K >= 3`` and
  label-dependent ``u`` it is *not* the gradient of any loss: its Jacobian is not
  symmetric (:func:`field_asymmetry`) and its circulation around a closed loop of logits
  is non-zero (:func:`circulation`). So "the loss is minimised at ..." has no meaning;
  the right words are "a stationary point of the update field".
* Stability of the fixed point: the eigenvalues of the Jacobian of ``G`` there, on the
  logit directions that change ``q`` (:func:`fixed_point_eigenvalues`); gradient descent
  ``z <- z - lr G(z)`` is locally stable when their real parts are positive.
* Uniqueness, numerically: descent from many random logits (:func:`descend`).
* The inverse map ``eta_k ∝ q_k / u(q, e_k)`` (:func:`gra_inverse`): which posterior
  has a given fixed point.
* The posteriors these checks run on: :func:`random_posteriors` (Dirichlet draws kept away
  from the simplex's edges) and :func:`stability_scan` over them.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import sympy as sp
import torch

from .._checks import ArrayLike, check_positive, check_positive_int
from ._derivation import Derivation, WeightFn, _check_distribution
from .gra import _weights_per_class, gra_weight

__all__ = [
    "gra_field",
    "field_jacobian",
    "field_asymmetry",
    "circulation",
    "fixed_point_eigenvalues",
    "descend",
    "gra_inverse",
    "random_posteriors",
    "stability_scan",
    "brier_field_curl",
    "fl_gra_potential",
    "app9_checks",
]


def _weight_fn(weight: WeightFn | str, weight_kwargs: dict[str, float]) -> WeightFn:
    fn = gra_weight(weight, **weight_kwargs) if isinstance(weight, str) else weight
    if not callable(fn):
        raise TypeError(f"weight must be callable or a name, got {type(weight).__name__}")
    return fn


def _eta(eta: ArrayLike) -> torch.Tensor:
    et = _check_distribution(eta, "eta")
    if et.shape[0] != 1:
        raise ValueError(f"eta must be a single distribution of shape (K,), got {tuple(et.shape)}")
    return et[0]


def _logits(z: ArrayLike, k: int) -> torch.Tensor:
    zt = torch.as_tensor(z, dtype=torch.float64)
    if zt.shape != (k,):
        raise ValueError(f"z must have shape ({k},), got {tuple(zt.shape)}")
    if not bool(torch.isfinite(zt).all()):
        raise ValueError("z contains NaN or inf values")
    return zt


def _field(z: torch.Tensor, eta: torch.Tensor, fn: WeightFn) -> torch.Tensor:
    q = torch.softmax(z, 0)
    w = _weights_per_class(fn, q)  # u(q, e_k); *not* detached: G is a function of z
    eye = torch.eye(q.shape[0], dtype=torch.float64)
    return ((eta * w)[:, None] * (q[None, :] - eye)).sum(0)


def gra_field(z: ArrayLike, eta: ArrayLike, weight: WeightFn | str, **weight_kwargs: float) -> torch.Tensor:
    """``G(z) = sum_k eta_k u(softmax(z), e_k) (softmax(z) - e_k)`` (float64 ``(K,)``).

    The expected GRA logit gradient at logits ``z`` when labels are drawn from ``eta``.
    ``weight``: a callable ``u(probs, targets)`` or a name for :func:`calib.theory.gra_weight`.
    """
    et = _eta(eta)
    return _field(_logits(z, et.shape[0]), et, _weight_fn(weight, weight_kwargs))


def field_jacobian(z: ArrayLike, eta: ArrayLike, weight: WeightFn | str, **weight_kwargs: float) -> torch.Tensor:
    """``J_ij = dG_i / dz_j`` at ``z`` by autograd (float64 ``(K, K)``)."""
    et = _eta(eta)
    fn = _weight_fn(weight, weight_kwargs)
    zt = _logits(z, et.shape[0])
    return torch.autograd.functional.jacobian(lambda v: _field(v, et, fn), zt)


def field_asymmetry(z: ArrayLike, eta: ArrayLike, weight: WeightFn | str, **weight_kwargs: float) -> float:
    """``max |J - J^T|``: 0 wherever ``G`` is locally a gradient (its Jacobian is a Hessian)."""
    J = field_jacobian(z, eta, weight, **weight_kwargs)
    return float((J - J.T).abs().max())


def circulation(eta: ArrayLike, weight: WeightFn | str, *, center: ArrayLike | None = None, radius: float = 1.0,
                plane: tuple[int, int] = (0, 1), n_points: int = 2000, **weight_kwargs: float) -> float:
    """``∮ G · dz`` around the circle of ``radius`` about ``center`` in the logit plane ``plane``.

    The circle ``z(t) = center + radius (cos t e_i + sin t e_j)``, ``t in [0, 2 pi)``, is
    closed, so the line integral of a gradient field is 0. Computed with the periodic
    trapezoid rule on ``n_points`` points (spectrally accurate for smooth fields).
    """
    et = _eta(eta)
    K = et.shape[0]
    fn = _weight_fn(weight, weight_kwargs)
    c = torch.zeros(K, dtype=torch.float64) if center is None else _logits(center, K)
    r = check_positive(radius, "radius")
    n = check_positive_int(n_points, "n_points", minimum=8)
    i, j = plane
    if not (0 <= i < K and 0 <= j < K and i != j):
        raise ValueError(f"plane must be two different logit indices in [0, {K}), got {plane!r}")
    total = 0.0
    for t in np.arange(n) * (2 * math.pi / n):
        z = c.clone()
        z[i] += r * math.cos(t)
        z[j] += r * math.sin(t)
        g = _field(z, et, fn)
        total += float(g[i] * (-r * math.sin(t)) + g[j] * (r * math.cos(t)))
    return total * (2 * math.pi / n)


def fixed_point_eigenvalues(eta: ArrayLike, weight: WeightFn | str, **weight_kwargs: float) -> np.ndarray:
    """Eigenvalues of the field's Jacobian at the GRA fixed point, on the sum-zero logits.

    ``G`` is unchanged when a constant is added to every logit, so ``J 1 = 0``; the
    ``K - 1`` eigenvalues that matter are those of ``B^T J B`` with ``B`` an orthonormal
    basis of ``{v : sum v = 0}``. Gradient descent on the logits is locally stable at the
    fixed point when all real parts are positive. Returns a complex ``(K - 1,)`` array.
    """
    from .gra import gra_fixed_point

    et = _eta(eta)
    q = gra_fixed_point(et, weight, **weight_kwargs)
    J = field_jacobian(q.log(), et, weight, **weight_kwargs)
    K = et.shape[0]
    basis = torch.linalg.qr(torch.eye(K, dtype=torch.float64) - 1.0 / K)[0][:, : K - 1]
    return np.linalg.eigvals((basis.T @ J @ basis).numpy())


def descend(eta: ArrayLike, weight: WeightFn | str, *, n_starts: int = 20, steps: int = 3000, lr: float = 1.0,
            scale: float = 4.0, seed: int = 0, **weight_kwargs: float) -> torch.Tensor:
    """Run ``z <- z - lr G(z)`` from ``n_starts`` random logits ``N(0, scale^2)``; final ``q``.

    Returns the ``(n_starts, K)`` predictions reached: numerical evidence of a unique,
    attracting fixed point when they all agree with :func:`calib.theory.gra_fixed_point`.
    """
    et = _eta(eta)
    fn = _weight_fn(weight, weight_kwargs)
    n = check_positive_int(n_starts, "n_starts")
    s = check_positive_int(steps, "steps")
    step = check_positive(lr, "lr")
    gen = torch.Generator().manual_seed(int(seed))
    z = torch.randn(n, et.shape[0], dtype=torch.float64, generator=gen) * check_positive(scale, "scale")
    eye = torch.eye(et.shape[0], dtype=torch.float64)
    K = et.shape[0]
    for _ in range(s):
        q = torch.softmax(z, 1)
        w = fn(q.repeat_interleave(K, 0), torch.arange(K).repeat(n)).reshape(n, K).to(torch.float64)
        g = ((et * w)[:, :, None] * (q[:, None, :] - eye[None])).sum(1)
        z = z - step * g
    return torch.softmax(z, 1)


def gra_inverse(q: ArrayLike, weight: WeightFn | str, **weight_kwargs: float) -> torch.Tensor:
    """The posterior whose GRA fixed point is ``q``: ``eta_k ∝ q_k / u(q, e_k)``.

    From ``q_k = eta_k u(q, e_k) / sum_i eta_i u(q, e_i)``: ``eta_k ∝ q_k / u(q, e_k)``.
    Needs ``u(q, e_k) > 0`` for every ``k`` (true for ``q`` inside the simplex).
    """
    qt = _check_distribution(q, "q", positive=True)
    if qt.shape[0] != 1:
        raise ValueError(f"q must be a single distribution of shape (K,), got {tuple(qt.shape)}")
    w = _weights_per_class(_weight_fn(weight, weight_kwargs), qt[0])
    if bool((w <= 0).any()):
        raise ValueError("the weight u(q, e_k) must be positive for every class to invert the fixed point")
    eta = qt[0] / w
    return eta / eta.sum()


def random_posteriors(n: int, num_classes: int | Sequence[int], *, seed: int = 0,
                      floor: float = 1e-3) -> list[torch.Tensor]:
    """``n`` posteriors per class count, drawn uniformly on the simplex and kept off its edges.

    For each ``K`` of ``num_classes`` in turn, one ``numpy`` generator seeded with ``seed``
    draws ``n`` rows of ``Dirichlet(1, ..., 1)`` (uniform on the ``K``-class simplex); each
    row is clipped below at ``floor`` and renormalised, ``eta <- max(eta, floor) / sum``,
    so no class is (numerically) impossible and the fixed point stays inside the simplex.
    Returns a list of float64 ``(K,)`` tensors, the ``K`` blocks in the order given.

    Raises:
        ValueError: ``n`` or a class count below its minimum (1 and 2), or ``floor`` not in
            ``[0, 1/K)``.
    """
    count = check_positive_int(n, "n")
    sizes = [num_classes] if isinstance(num_classes, int) else list(num_classes)
    if not sizes:
        raise ValueError("num_classes must name at least one class count")
    sizes = [check_positive_int(k, "num_classes", minimum=2) for k in sizes]
    low = float(floor)
    if not 0 <= low < 1 / max(sizes):
        raise ValueError(f"floor must lie in [0, 1/K) = [0, {1 / max(sizes):.3g}), got {floor}")
    rng = np.random.default_rng(seed)
    out = []
    for k in sizes:
        for eta in rng.dirichlet(np.ones(k), size=count):
            out.append(torch.as_tensor(np.clip(eta, low, None) / np.clip(eta, low, None).sum()))
    return out


def stability_scan(etas: Sequence[ArrayLike], weight: WeightFn | str, **weight_kwargs: float) -> dict[str, float]:
    """The extreme eigenvalues of :func:`fixed_point_eigenvalues` over many posteriors.

    Returns ``{"posteriors": len(etas), "min_real": ..., "max_abs_imag": ...}``: the
    smallest real part and the largest imaginary part (in absolute value) of the
    field's Jacobian at each fixed point, on the sum-zero logits. ``min_real > 0`` means
    every fixed point checked is locally stable under gradient descent on the logits.

    Raises:
        ValueError: ``etas`` is empty.
    """
    if len(etas) == 0:
        raise ValueError("etas must hold at least one posterior")
    spectra = [fixed_point_eigenvalues(eta, weight, **weight_kwargs) for eta in etas]
    return {
        "posteriors": len(spectra),
        "min_real": float(min(ev.real.min() for ev in spectra)),
        "max_abs_imag": float(max(np.abs(ev.imag).max() for ev in spectra)),
    }


def brier_field_curl(eta: tuple[sp.Rational, ...] = (sp.Rational(3, 5), sp.Rational(3, 10), sp.Rational(1, 10)),
                     ) -> Derivation:
    """sympy: the BSCE-GRA field (``u = ||q - e_y||_2^2``) has a non-zero curl for ``K = 3``.

    ``G_j(z) = sum_k eta_k u(q, e_k) (q_j - delta_jk)``; a gradient field has
    ``dG_1/dz_2 = dG_2/dz_1``. Step ``curl`` is ``dG_1/dz_2 - dG_2/dz_1`` at ``z = 0``
    for the given ``eta`` (exact rationals); it is not 0, so no loss has ``G`` as its
    gradient. Step ``curl_ce`` is the same quantity for CE (``u = 1``): 0. (The curl does
    vanish at some points, e.g. at ``q = eta``; a single non-zero value settles it.)
    """
    K = len(eta)
    if K < 3:
        raise ValueError(f"eta must have at least 3 classes (K = 2 fields are always gradients), got {K}")
    eta_s = [sp.nsimplify(e) for e in eta]
    if sum(eta_s) != 1 or any(e <= 0 for e in eta_s):
        raise ValueError(f"eta must be positive and sum to 1, got {eta!r}")
    z = sp.symbols(f"z_1:{K + 1}", real=True)
    den = sum(sp.exp(zi) for zi in z)
    q = [sp.exp(zi) / den for zi in z]

    def field(weight):
        return [sum(eta_s[k] * weight(k) * (q[j] - (1 if j == k else 0)) for k in range(K)) for j in range(K)]

    brier_w = lambda k: sum((q[i] - (1 if i == k else 0)) ** 2 for i in range(K))  # noqa: E731
    G, G_ce = field(brier_w), field(lambda k: 1)
    at0 = {zi: (sp.log(2) if i == 0 else 0) for i, zi in enumerate(z)}  # q ∝ (2, 1, ..., 1)
    curl = sp.nsimplify(sp.simplify((sp.diff(G[0], z[1]) - sp.diff(G[1], z[0])).subs(at0)))
    curl_ce = sp.simplify((sp.diff(G_ce[0], z[1]) - sp.diff(G_ce[1], z[0])).subs(at0))
    return Derivation(
        "BSCE-GRA update field is not a gradient (K = 3)",
        {"field_1": G[0], "curl": curl, "curl_ce": curl_ce},
    )


def fl_gra_potential() -> Derivation:
    """sympy: FL-GRA *is* a gradient: ``Phi(p) = int_p^1 (1 - t)^gamma / t dt`` of ``p = q_y``.

    A weight that depends on ``q_y`` only, ``u(q_y)``, gives the update
    ``u(q_y) (q - e_y) = grad_z Phi(q_y)`` with ``Phi'(p) = -u(p) / p``, because
    ``d q_y / d z_j = q_y (delta_jy - q_j)``. Steps: ``dPhi_dp`` (by the fundamental
    theorem of calculus) and ``chain_rule_residual`` (``dPhi/dz_j - u (q_j - delta_jy)``
    for ``K = 3``, ``y = 1``, ``gamma = 2``, all components, simplified to 0); ``potential``
    is ``Phi`` in closed form for ``gamma = 2``.
    """
    p, t = sp.symbols("p t", positive=True)
    gamma = sp.Symbol("gamma", positive=True)
    phi = sp.Integral((1 - t) ** gamma / t, (t, p, 1))
    dphi = sp.diff(phi, p).doit()
    phi2 = sp.simplify(sp.integrate((1 - t) ** 2 / t, (t, p, 1)))
    z = sp.symbols("z_1:4", real=True)
    den = sum(sp.exp(zi) for zi in z)
    q = [sp.exp(zi) / den for zi in z]
    phi_z = phi2.subs(p, q[0])
    residual = sp.Tuple(*[
        sp.simplify(sp.diff(phi_z, z[j]) - (1 - q[0]) ** 2 * (q[j] - (1 if j == 0 else 0))) for j in range(3)
    ])
    return Derivation(
        "FL-GRA is the gradient of a potential",
        {"potential_integral": phi, "dPhi_dp": dphi, "potential": phi2, "chain_rule_residual": residual},
    )


def app9_checks(num_classes: int = 3) -> Derivation:
    """What Lin et al. (2024, App. 9) assume, checked at their claimed optimum ``q = eta``.

    Steps: ``C_at_optimum`` (the detached weight ``C = ||q - eta||^2`` at ``q = eta``: 0,
    so it is not a constant ``C > 0`` there); ``CE_at_optimum`` (``-sum eta log q`` at
    ``q = eta`` is ``H(eta)``, positive unless ``eta`` is one-hot, not 0);
    ``weighted_stationarity`` (``C (-eta_i / q_i) + mu`` with ``C = 0``: any ``mu = 0``
    solves it, so the Lagrange condition holds trivially there).
    """
    K = check_positive_int(num_classes, "num_classes", minimum=2)
    q = sp.symbols(f"q_1:{K + 1}", positive=True)
    eta = sp.symbols(f"eta_1:{K + 1}", positive=True)
    mu = sp.Symbol("mu", real=True)
    C = sum((qi - e) ** 2 for qi, e in zip(q, eta))
    ce = -sum(e * sp.log(qi) for e, qi in zip(eta, q))
    at = {qi: e for qi, e in zip(q, eta)}
    stationarity = [(C * (-e / qi) + mu).subs(at) for e, qi in zip(eta, q)]
    return Derivation(
        "Lin et al. (2024), App. 9, at q = eta",
        {
            "C": C,
            "C_at_optimum": C.subs(at),
            "CE_at_optimum": ce.subs(at),
            "weighted_stationarity": sp.Tuple(*stationarity),
        },
    )
