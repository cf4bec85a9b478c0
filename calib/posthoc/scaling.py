"""Vector, matrix and Dirichlet scaling: an affine map before the softmax, fitted by NLL.

All three fit ``p = softmax(W x + b)`` on validation data, where ``x`` is the logit
vector ``g`` (vector and matrix scaling; Guo et al. (2017) section 4.2) or the
log-probabilities ``ln softmax(g)`` (Dirichlet calibration; Kull et al. (2019) section 3).
Vector scaling restricts ``W`` to a diagonal. The objective is the mean NLL plus the
off-diagonal and intercept regulariser (ODIR) of Kull et al. (2019) section 3:

    L(W, b) = (1/N) sum_i -log softmax(W x_i + b)_{y_i}
              + lambda / (K (K - 1)) sum_{j != k} W_jk^2 + mu / K sum_k b_k^2

(``lambda = off_diagonal``, ``mu = intercept``; both 0 gives plain matrix scaling). ``L``
is convex in ``(W, b)``: the logits are linear in the parameters and the log-sum-exp is
convex. It is minimised from ``W = I, b = 0`` (the identity map) in float64 on the device
of the logits, by Newton's method with the exact Hessian when there are at most 600
parameters (matrix scaling up to K = 24, vector scaling up to K = 300), else by
full-batch L-BFGS with a strong-Wolfe line search; both are deterministic for given
inputs on a given device. The features are standardised inside the fit and the flat
directions of the softmax projected out (``_AffineScaling._representative``), which
changes the conditioning, not the optimum.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable

import torch
import torch.nn.functional as F

from .._checks import ArrayLike, check_nonnegative, check_positive_int
from ._base import check_logits_like, fit_inputs, not_fitted, warn_absent_classes

__all__ = ["VectorScaling", "MatrixScaling", "DirichletCalibration", "minimise_lbfgs", "minimise_newton"]

Tensor = torch.Tensor
# L-BFGS stops when every gradient entry of the (mean) objective is below _GRAD_TOL; a
# fit that ends above _WARN_TOL after max_iter iterations is reported as not converged.
_GRAD_TOL = 1e-8
_WARN_TOL = 1e-5
# Newton (exact Hessian, O(N P^2) per step) fits up to _NEWTON_MAX_PARAMS parameters P
# (matrix scaling to K = 24, vector scaling to K = 300); L-BFGS beyond.
_NEWTON_MAX_PARAMS = 600
_NEWTON_MAX_ITER = 100
_NEWTON_TOL = 1e-10


def minimise_lbfgs(objective: Callable[[Tensor], Tensor], x0: Tensor, max_iter: int) -> tuple[Tensor, float]:
    """``argmin_x objective(x)`` by L-BFGS (strong Wolfe), and the largest final gradient entry.

    ``objective`` maps a flat float64 parameter tensor to a scalar; ``x0`` is the start.
    """
    x = x0.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        opt = torch.optim.LBFGS([x], lr=1.0, max_iter=max_iter, max_eval=2 * max_iter, history_size=20,
                                tolerance_grad=_GRAD_TOL, tolerance_change=1e-15, line_search_fn="strong_wolfe")

        def closure() -> Tensor:
            opt.zero_grad()
            loss = objective(x)
            loss.backward()
            return loss

        opt.step(closure)
        (grad,) = torch.autograd.grad(objective(x), x)
    return x.detach(), float(grad.abs().max())


def _nll_derivatives(design: Tensor, y: Tensor, theta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Mean NLL of ``softmax(z)``, ``z_ik = sum_d Theta_kd F_ik d``, with its gradient and Hessian in ``theta``.

    ``dL/dTheta_kd = mean_i (p_ik - 1[y_i = k]) F_ikd`` and ``d2L/dTheta_kd dTheta_le =
    mean_i (p_ik 1[k = l] - p_ik p_il) F_ikd F_ile`` (the softmax Jacobian): a block
    diagonal minus ``Q'Q / N`` with ``Q_i = p_i * F_i`` flattened, ``O(N (K D)^2)``.
    """
    n, k, d = design.shape
    z = torch.einsum("nkd,kd->nk", design, theta.view(k, d))
    p = torch.softmax(z, dim=1)
    r = p.clone()
    r[torch.arange(n, device=y.device), y] -= 1
    grad = torch.einsum("nk,nkd->kd", r, design).flatten() / n
    q = (p[:, :, None] * design).reshape(n, k * d)
    hess = -(q.T @ q) / n
    block = torch.einsum("nk,nkd,nke->kde", p, design, design) / n
    idx = torch.arange(k, device=y.device)
    hess.view(k, d, k, d)[idx, :, idx, :] += block
    return torch.nn.functional.cross_entropy(z, y), grad, hess


def minimise_newton(objective: Callable[[Tensor], Tensor], design: Tensor, y: Tensor,
                    penalty: Callable[[Tensor], Tensor], x0: Tensor, max_iter: int) -> tuple[Tensor, float]:
    """``argmin objective`` (NLL of a softmax linear in ``x`` plus a quadratic ``penalty``) by Newton.

    Exact Hessian (:func:`_nll_derivatives`, plus the constant Hessian of the quadratic
    penalty), a ridge of 1e-10 of its largest diagonal entry for the directions along which
    the softmax is flat, and Armijo backtracking; stops when every gradient entry is below
    1e-10. Returns the minimiser and the largest final gradient entry.
    """
    x = x0.detach().clone()
    with torch.enable_grad():
        pen_hess = torch.autograd.functional.hessian(penalty, x, vectorize=True)
    eye = torch.eye(x.numel(), dtype=x.dtype, device=x.device)
    grad_max = math.inf
    for _ in range(min(max_iter, _NEWTON_MAX_ITER)):
        with torch.enable_grad():
            xg = x.clone().requires_grad_(True)
            pen = penalty(xg)
            (pen_grad,) = torch.autograd.grad(pen, xg)
        nll, grad, hess = _nll_derivatives(design, y, x)
        value, grad, hess = nll + pen.detach(), grad + pen_grad, hess + pen_hess
        grad_max = float(grad.abs().max())
        if grad_max <= _NEWTON_TOL:
            break
        ridge = 1e-10 * float(hess.diagonal().abs().max())
        direction = torch.linalg.solve(hess + ridge * eye, -grad)
        slope, step = float(grad @ direction), 1.0
        while step > 1e-12:
            candidate = x + step * direction
            if float(objective(candidate)) <= float(value) + 1e-4 * step * slope:
                break
            step *= 0.5
        else:
            break  # no decrease along the Newton direction: at the optimum to rounding
        x = candidate
    return x, grad_max


def warn_unconverged(who: str, grad: float, max_iter: int) -> None:
    if not grad <= _WARN_TOL:
        warnings.warn(
            f"{who} did not converge in max_iter = {max_iter} iterations (largest gradient entry "
            f"{grad:.3g}); the validation set may separate the classes. Raise max_iter or regularise",
            RuntimeWarning,
            stacklevel=3,
        )


class _AffineScaling:
    """Shared fit/predict of ``softmax(W x + b)``; subclasses say what ``x`` and ``W`` are."""

    _diagonal = False

    def __init__(self, off_diagonal: float = 0.0, intercept: float = 0.0, max_iter: int = 1000):
        self.off_diagonal = check_nonnegative(off_diagonal, "off_diagonal")
        self.intercept = check_nonnegative(intercept, "intercept")
        self.max_iter = check_positive_int(max_iter, "max_iter")
        self._weights: Tensor | None = None
        self._bias: Tensor | None = None

    def __repr__(self) -> str:
        state = "unfitted" if self._weights is None else f"fitted on K = {self._bias.numel()}"
        return (f"{type(self).__name__}(off_diagonal={self.off_diagonal:g}, intercept={self.intercept:g}, "
                f"max_iter={self.max_iter}, {state})")

    @staticmethod
    def _features(g: Tensor) -> Tensor:
        """``x`` from float64 logits: the logits themselves (overridden by Dirichlet calibration)."""
        return g

    @property
    def weights(self) -> Tensor:
        """Fitted ``W``: ``(K, K)`` float64 (``(K,)``, the diagonal, for vector scaling)."""
        if self._weights is None:
            raise not_fitted(type(self).__name__)
        return self._weights

    @property
    def bias(self) -> Tensor:
        """Fitted intercept ``b``, float64 ``(K,)``."""
        self.weights  # noqa: B018 - raises when unfitted
        return self._bias

    def _unpack(self, theta: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """``theta`` is the flattened ``(K, D)`` matrix ``[W | b]`` (``[w | b]`` when diagonal)."""
        t = theta.view(k, -1)
        return (t[:, 0] if self._diagonal else t[:, :k]), t[:, -1]

    def _design(self, u: Tensor) -> Tensor:
        """``(N, K, D)`` features with ``z_ik = sum_d Theta_kd F_ikd`` (``[u_i, 1]`` or ``[u_ik, 1]``)."""
        n, k = u.shape
        ones = torch.ones(n, k, 1, dtype=u.dtype, device=u.device)
        if self._diagonal:
            return torch.cat([u[:, :, None], ones], dim=2)
        return torch.cat([u, ones[:, 0]], dim=1)[:, None, :].expand(n, k, k + 1)

    def _map(self, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return (x * w if self._diagonal else x @ w.T) + b

    def _representative(self, w: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        """The member of ``(W + 1 v', b + c 1)`` (all give the same softmax) with the least penalty.

        Adding one number to every logit leaves the softmax unchanged, so the NLL is flat
        along ``v`` and ``c``; the penalty is least at ``c = -mean(b)`` and ``v_k = -mean_{j != k}
        W_jk``. Optimising through this projection removes the flat directions that the
        penalty alone would bend only slightly (slow L-BFGS progress), without moving the optimum.
        """
        b = b - b.mean()
        if self._diagonal:
            return w, b
        k = w.shape[0]
        off_sum = w.sum(dim=0) - torch.diagonal(w)
        return w - off_sum[None, :] / (k - 1), b

    def _penalty(self, w: Tensor, b: Tensor, k: int) -> Tensor:
        total = self.intercept / k * b.square().sum()
        if not self._diagonal and self.off_diagonal > 0:
            off = w.square().sum() - torch.diagonal(w).square().sum()
            total = total + self.off_diagonal / (k * (k - 1)) * off
        return total

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> "_AffineScaling":
        who = type(self).__name__
        g, y = fit_inputs(logits, labels, who)
        k = g.shape[1]
        if self.intercept == 0:
            warn_absent_classes(y, k, who)
        x = self._features(g.double())
        # The optimiser runs on standardised features u = (x - m) / s (log-probabilities reach -50 and
        # beyond, which makes the raw problem ill-conditioned); the map and the penalty are
        # those of the original parameters W = W' / s, b = b' - W m, so the optimum is the same.
        m = x.mean(dim=0)
        s = x.std(dim=0)
        s = torch.where(s > 1e-12, s, torch.ones_like(s))
        u = (x - m) / s

        def original(theta: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
            w1, b1 = self._unpack(theta, k)
            w = w1 / s
            return w1, b1, *self._representative(w, b1 - self._map(m[None, :], w, 0.0)[0])

        def objective(theta: Tensor) -> Tensor:
            w1, b1, w, b = original(theta)
            return F.cross_entropy(self._map(u, w1, b1), y) + self._penalty(w, b, k)

        w0 = s[:, None] if self._diagonal else torch.diag(s)  # W = I, b = 0
        theta0 = torch.cat([w0, m[:, None]], dim=1).flatten()
        if theta0.numel() <= _NEWTON_MAX_PARAMS:
            penalty = lambda theta: self._penalty(*original(theta)[2:], k)  # noqa: E731
            theta, grad = minimise_newton(objective, self._design(u), y, penalty, theta0, self.max_iter)
        else:
            theta, grad = minimise_lbfgs(objective, theta0, self.max_iter)
        warn_unconverged(who, grad, self.max_iter)
        _, _, w, b = original(theta)
        self._weights, self._bias = w.detach().clone(), b.detach().clone()
        if self.off_diagonal == 0 and self.intercept == 0 and bool(self._map(x, w, b).argmax(1).eq(y).all()):
            warnings.warn(
                f"every validation prediction is correct, so {who}'s NLL keeps falling as its weights grow "
                "and has no finite minimiser; the fit stopped where the optimiser did. Use a harder validation set "
                "or regularise (off_diagonal, intercept > 0)",
                RuntimeWarning,
                stacklevel=2,
            )
        return self

    def _checked(self, logits: ArrayLike) -> Tensor:
        self.weights  # noqa: B018 - raises when unfitted
        return check_logits_like(logits, self._bias.numel(), type(self).__name__)

    def _calibrated(self, g: Tensor) -> Tensor:
        x = self._features(g.double())
        return self._map(x, self._weights.to(x.device), self._bias.to(x.device))

    def transform(self, logits: ArrayLike) -> Tensor:
        """Calibrated logits ``W x + b``, float64 on the device of ``logits``."""
        return self._calibrated(self._checked(logits))

    def predict_proba(self, logits: ArrayLike) -> Tensor:
        """Calibrated probabilities ``softmax(W x + b)``, computed in float64, returned in the logits' dtype."""
        g = self._checked(logits)
        return torch.softmax(self._calibrated(g), dim=1).to(g.dtype)

    def fit_transform(self, logits: ArrayLike, labels: ArrayLike) -> Tensor:
        return self.fit(logits, labels).transform(logits)


class VectorScaling(_AffineScaling):
    """Vector scaling, ``p = softmax(w * g + b)`` with a weight and an intercept per class.

    Guo et al. (2017) section 4.2: matrix scaling with ``W`` restricted to a diagonal
    ``w`` (``2K`` parameters). With all ``w_k = 1/T`` and ``b = 0`` it is temperature
    scaling. ``intercept`` is ``mu`` of the ODIR penalty ``mu / K sum_k b_k^2`` (Kull et al.
    2019, section 3); the diagonal is not penalised. Fitted in float64 from ``w = 1, b = 0``
    (Newton, or L-BFGS above 600 parameters; module docstring). After ``fit``, ``weights``
    is ``w`` ``(K,)`` and ``bias`` is ``b``.

    >>> vs = VectorScaling().fit(val_logits, val_labels)   # doctest: +SKIP
    >>> test_probs = vs.predict_proba(test_logits)         # doctest: +SKIP
    """

    _diagonal = True

    def __init__(self, intercept: float = 0.0, max_iter: int = 1000):
        super().__init__(0.0, intercept, max_iter)

    def __repr__(self) -> str:
        state = "unfitted" if self._weights is None else f"fitted on K = {self._bias.numel()}"
        return f"VectorScaling(intercept={self.intercept:g}, max_iter={self.max_iter}, {state})"


class MatrixScaling(_AffineScaling):
    """Matrix scaling, ``p = softmax(W g + b)``, with the ODIR penalty (Kull et al. 2019, section 3).

    Guo et al. (2017) section 4.2 fit a full ``K x K`` matrix ``W`` and intercept ``b``
    on the logits ``g``; with ``K^2 + K`` parameters it overfits a small validation set
    unless regularised. Kull et al. (2019) section 3 penalise only what moves the map away
    from a per-class rescaling: ``off_diagonal / (K (K - 1)) sum_{j != k} W_jk^2 +
    intercept / K sum_k b_k^2`` (their ``lambda`` and ``mu``, picked by cross-validation
    there). Both 0 (the default) is unregularised matrix scaling, i.e. multinomial
    logistic regression on the logits. Fitted in float64 from ``W = I, b = 0`` (Newton up to
    K = 24, L-BFGS beyond; module docstring).
    """


class DirichletCalibration(_AffineScaling):
    """Dirichlet calibration, ``p = softmax(W ln q + b)`` with ``q = softmax(g)`` (Kull et al. 2019).

    Kull et al. (2019) section 3: the calibration map of a Dirichlet class-conditional
    model is a linear layer on the log-probabilities, ``mu(q) = softmax(W ln q + b)``,
    fitted by log-loss with the ODIR penalty ``off_diagonal / (K (K - 1)) sum_{j != k}
    W_jk^2 + intercept / K sum_k b_k^2``. It takes logits like every calibrator here and
    computes ``ln q = log_softmax(g)`` itself (no clipping needed), so on log-probabilities
    it is :class:`MatrixScaling`; on logits it differs from matrix scaling by the term
    ``-logsumexp(g) W 1``, which changes from row to row. Fitted in float64 from ``W = I,
    b = 0`` (the identity map), as :class:`MatrixScaling`.
    """

    @staticmethod
    def _features(g: Tensor) -> Tensor:
        return torch.log_softmax(g, dim=1)
