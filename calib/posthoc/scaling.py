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
convex. It is minimised from ``W = I, b = 0`` (the identity map) by full-batch L-BFGS
with a strong-Wolfe line search, in float64 on the device of the logits; the run is
deterministic for given inputs on a given device.
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch
import torch.nn.functional as F

from .._checks import ArrayLike, check_nonnegative, check_positive_int
from ._base import check_logits_like, fit_inputs, not_fitted, warn_absent_classes

__all__ = ["VectorScaling", "MatrixScaling", "DirichletCalibration", "minimise_lbfgs"]

Tensor = torch.Tensor
# L-BFGS stops when every gradient entry of the (mean) objective is below _GRAD_TOL; a
# fit that ends above _WARN_TOL after max_iter iterations is reported as not converged.
_GRAD_TOL = 1e-8
_WARN_TOL = 1e-5


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


def warn_unconverged(who: str, grad: float, max_iter: int) -> None:
    if not grad <= _WARN_TOL:
        warnings.warn(
            f"{who} did not converge in max_iter = {max_iter} L-BFGS iterations (largest gradient entry "
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
        w = theta[:k] if self._diagonal else theta[: k * k].view(k, k)
        return w, theta[-k:]

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
        # L-BFGS runs on standardised features u = (x - m) / s (log-probabilities reach -50 and
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

        w0 = s if self._diagonal else torch.diag(s)  # W = I, b = 0
        theta0 = torch.cat([w0.flatten(), m])
        theta, grad = minimise_lbfgs(objective, theta0, self.max_iter)
        warn_unconverged(who, grad, self.max_iter)
        _, _, w, b = original(theta)
        self._weights, self._bias = w.detach().clone(), b.detach().clone()
        if self.off_diagonal == 0 and self.intercept == 0 and bool(self._map(x, w, b).argmax(1).eq(y).all()):
            warnings.warn(
                f"every validation prediction is correct, so {who}'s NLL keeps falling as its weights grow "
                "and has no finite minimiser; the fit stopped where L-BFGS did. Use a harder validation set "
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
    2019, section 3); the diagonal is not penalised. Fitted by L-BFGS in float64 from
    ``w = 1, b = 0`` (module docstring). After ``fit``, ``weights`` is ``w`` ``(K,)`` and
    ``bias`` is ``b``.

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
    logistic regression on the logits. Fitted by L-BFGS in float64 from ``W = I, b = 0``.
    """


class DirichletCalibration(_AffineScaling):
    """Dirichlet calibration, ``p = softmax(W ln q + b)`` with ``q = softmax(g)`` (Kull et al. 2019).

    Kull et al. (2019) section 3: the calibration map of a Dirichlet class-conditional
    model is a linear layer on the log-probabilities, ``mu(q) = softmax(W ln q + b)``,
    fitted by log-loss with the ODIR penalty ``off_diagonal / (K (K - 1)) sum_{j != k}
    W_jk^2 + intercept / K sum_k b_k^2``. It takes logits like every calibrator here and
    computes ``ln q = log_softmax(g)`` itself (no clipping needed), so on log-probabilities
    it is :class:`MatrixScaling`; on logits it differs from matrix scaling by the term
    ``-logsumexp(g) W 1``, which changes from row to row. Fitted by L-BFGS in float64 from
    ``W = I, b = 0`` (the identity map).
    """

    @staticmethod
    def _features(g: Tensor) -> Tensor:
        return torch.log_softmax(g, dim=1)
