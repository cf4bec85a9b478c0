"""The BSCE-GRA optimum (Lin et al. 2024, App. 9) and the fixed point of gradient weighting when the
weight uses the one-hot label; constant-logit and linear-model training that land on it.
The update field itself (curl, stability, inverse map) is in :mod:`calib.theory.gra_field`;
:func:`simplex_slice` and :func:`spread_within` draw and check the weight maps of Lin et al. 2024, Fig. 2."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import sympy as sp
import torch
from scipy import optimize

from .._checks import ArrayLike, as_tensor, check_labels, check_nonnegative, check_positive_int
from ..losses import uncertainty
from ._derivation import Derivation, WeightFn, _check_distribution


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
    """A weight ``u(probs, targets) -> (N,)`` from :mod:`calib.losses.uncertainty` by name.

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


def spread_within(values: ArrayLike, *keys: ArrayLike, decimals: int = 9) -> float:
    """The largest range ``max - min`` of ``values`` over groups of points whose keys agree.

    Points are grouped by the tuple of their ``keys`` (each rounded to ``decimals``
    places, so float noise does not split a group); the result is the largest
    within-group range. It is 0 exactly when ``values`` is a function of the keys on these
    points: how the weight maps of Lin et al. 2024, Fig. 2 are checked (``u_FL`` depends on
    ``p_y`` alone, ``u_DFL`` on ``p_y`` and ``p_j``, ``u_BS`` on more).

    Raises:
        ValueError: no keys, or ``values`` and a key not 1-D of the same length.
    """
    v = as_tensor(values, "values", dtype=torch.float64)
    if not keys:
        raise ValueError("keys must hold at least one key to group by")
    if v.ndim != 1 or v.numel() == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {tuple(v.shape)}")
    columns = [as_tensor(k, "keys", dtype=torch.float64).to(v.device) for k in keys]
    if any(k.shape != v.shape for k in columns):
        raise ValueError(f"every key must have the shape of values {tuple(v.shape)}, got {[tuple(k.shape) for k in columns]}")
    groups = torch.stack([k.round(decimals=decimals) for k in columns], 1)
    _, inverse = torch.unique(groups, dim=0, return_inverse=True)
    n = int(inverse.max()) + 1
    hi = torch.full((n,), -math.inf, dtype=v.dtype, device=v.device).scatter_reduce(0, inverse, v, "amax")
    lo = torch.full((n,), math.inf, dtype=v.dtype, device=v.device).scatter_reduce(0, inverse, v, "amin")
    return float((hi - lo).max())
