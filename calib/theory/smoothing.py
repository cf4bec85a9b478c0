"""Logit scaling and label smoothing: student report 2021, Theorem 1 (scaling logits by ``t > 1``
sharpens the top probability) and Wang et al. 2021, Eq. (1) (label smoothing is CE plus a
CE against the uniform distribution)."""
from __future__ import annotations

from typing import Sequence

import sympy as sp
import torch

from .._checks import ArrayLike, as_tensor, check_positive_int
from ._derivation import Derivation


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
