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
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._checks import ArrayLike, check_positive, check_positive_int
from .theory import WeightFn, _check_distribution, _weights_per_class, gra_weight

__all__ = [
    "gra_field",
    "field_jacobian",
    "field_asymmetry",
    "circulation",
    "fixed_point_eigenvalues",
    "descend",
    "gra_inverse",
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
    from .theory import gra_fixed_point

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
