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
convex. It is minimised in float64 on the device of the logits by full-batch L-BFGS
(:func:`~calib.posthoc._base.minimise_lbfgs`, the optimiser of every calibrator here),
deterministic for given inputs on a given device. The search starts at temperature
scaling, ``W = I / T, b = 0`` with ``T`` fitted first, and takes the Hessian's diagonal
blocks there (one per row of ``[W | b]``) as its curvature
(``_AffineScaling._curvature``); the features are standardised and the flat directions of
the softmax projected out (``_AffineScaling._representative``). All of these change the
conditioning, not the optimum: on the CIFAR records L-BFGS then needs 15-200 evaluations
instead of 300-5,000 (``benchmarks/posthoc.py``).
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._checks import ArrayLike, check_nonnegative, check_positive_int
from ._base import (
    CalibrationModule,
    Calibrator,
    SeparationWarning,
    check_logits_like,
    fit_inputs,
    like_input,
    minimise_lbfgs,
    not_fitted,
    warn_absent_classes,
    warn_unconverged,
)
from .temperature import T_LIMIT, _fit_nll

__all__ = ["VectorScaling", "MatrixScaling", "DirichletCalibration", "AffineScalingModule"]

Tensor = torch.Tensor
# A ridge of _RIDGE times the mean curvature keeps every preconditioner block invertible
# (a class the start predicts with probability ~0 everywhere has a ~0 block); a mean below
# _FLAT (every probability 0 or 1 to rounding) leaves L-BFGS unpreconditioned.
_RIDGE = 1e-8
_FLAT = 1e-12


def _warn_if_separated(who: str, model_right: Tensor, map_right: Tensor) -> None:
    """Warn when an affine map of the features classifies every validation sample correctly.

    Such a map separates the data: scaling it up drives the unpenalised NLL towards 0, so
    there is no finite minimiser and the fitted weights are wherever the optimiser stopped.
    The model's own predictions (the identity map, one member of the family) may do it, or
    only the fitted map may, from a model far from perfect; the message says which.
    """
    if bool(model_right.all()):
        why = "every validation prediction is correct"
    elif bool(map_right.all()):
        why = (f"the fitted map classifies every validation sample correctly (the model's own accuracy is "
               f"{float(model_right.double().mean()):.3g}): it separates the validation data")
    else:
        return
    warnings.warn(
        f"{why}, so {who}'s NLL falls towards 0 as its weights grow and has no finite minimiser; the fit "
        "stopped where the optimiser did. Use a larger or harder validation set, or regularise "
        "(off_diagonal, intercept > 0)",
        SeparationWarning,
        stacklevel=3,
    )


def _affine(x: Tensor, w: Tensor, b: Tensor | float) -> Tensor:
    """``W x + b`` for each row ``x``; a 1-D ``w`` is a diagonal (vector scaling)."""
    return (x * w if w.dim() == 1 else x @ w.T) + b


class _AffineScaling(Calibrator):
    """Shared fit/predict of ``softmax(W x + b)``; subclasses say what ``x`` and ``W`` are."""

    _diagonal = False
    _log_softmax = False

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

    def _features(self, g: Tensor) -> Tensor:
        """``x`` from float64 logits: the logits, or ``log_softmax(g)`` for Dirichlet calibration."""
        return torch.log_softmax(g, dim=1) if self._log_softmax else g

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

    @staticmethod
    def _map(x: Tensor, w: Tensor, b: Tensor | float) -> Tensor:
        return _affine(x, w, b)

    def _representative(self, w: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        """The member of ``(W + 1 v', b + c 1)`` (all give the same softmax) with the least penalty.

        Adding one number to every logit leaves the softmax unchanged, so the NLL is flat
        along ``v`` and ``c``; the penalty is least at ``c = -mean(b)`` and ``v_k = -mean_{j != k}
        W_jk``. Optimising through this projection makes the objective exactly flat there:
        the penalty alone bends those directions so slightly that L-BFGS crawls along them
        (10-80x more time on the ODIR fits of the tests), without moving the optimum.
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

    def _curvature(self, u: Tensor, y: Tensor, theta: Tensor, m: Tensor, s: Tensor) -> Tensor:
        """``(K, D, D)``: the Hessian blocks of the objective for each row ``[W'_k | b'_k]`` at ``theta``.

        The NLL block of row ``k`` is ``(1/N) sum_i p_ik (1 - p_ik) f_ik f_ik'`` with ``f_ik =
        [u_i, 1]`` (``[u_ik, 1]`` for vector scaling); the ODIR penalty adds its own (constant)
        block, taken before the least-penalty projection, where it is separate per row:
        ``2 mu / K a a'`` for ``b_k = a' [W'_k | b'_k]`` and ``2 lambda / (K (K - 1)) / s_j^2`` on
        the off-diagonal weights. The blocks leave out the coupling of the classes through
        the softmax (``-p_ik p_il``), so they precondition, they are not Newton's Hessian.
        """
        n, k = u.shape
        w1, b1 = self._unpack(theta, k)
        p = torch.softmax(self._map(u, w1, b1), dim=1)
        r = p * (1 - p) / n
        if self._diagonal:
            a = torch.stack([-m / s, torch.ones_like(s)], dim=1)  # (K, 2)
            ru = r * u
            top = torch.stack([(ru * u).sum(dim=0), ru.sum(dim=0)], dim=1)
            blocks = torch.stack([top, torch.stack([ru.sum(dim=0), r.sum(dim=0)], dim=1)], dim=1)
            return blocks + 2 * self.intercept / k * a[:, :, None] * a[:, None, :]
        f = torch.cat([u, torch.ones_like(u[:, :1])], dim=1)  # (N, K + 1)
        blocks = torch.stack([(f * r[:, j, None]).T @ f for j in range(k)])
        a = torch.cat([-m / s, torch.ones_like(s[:1])])
        blocks = blocks + 2 * self.intercept / k * torch.outer(a, a)
        if self.off_diagonal > 0:
            off = 2 * self.off_diagonal / (k * (k - 1)) / s.square()
            idx = torch.arange(k, device=u.device)
            diag = blocks.diagonal(dim1=1, dim2=2)[:, :k]  # a view: row j, weight column l
            diag += torch.where(idx[:, None] == idx[None, :], 0.0, off[None, :])
        return blocks

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
        m, s = x.mean(dim=0), x.std(dim=0)
        s = torch.where(s > 1e-12, s, torch.ones_like(s))
        u = (x - m) / s

        def original(theta: Tensor) -> tuple[Tensor, Tensor]:
            w1, b1 = self._unpack(theta, k)
            w = w1 / s
            return self._representative(w, b1 - self._map(m[None, :], w, 0.0)[0])

        def objective(theta: Tensor) -> Tensor:
            w1, b1 = self._unpack(theta, k)
            return F.cross_entropy(self._map(u, w1, b1), y) + self._penalty(*original(theta), k)

        # Start at temperature scaling, W = I / T, b = 0 (one fitted number, cheap), with the
        # row blocks of the Hessian there as L-BFGS's curvature: theta = theta0 + L^-T phi for
        # blocks L L'. On CIFAR fits this takes 50-200 evaluations instead of 300-5,000.
        t = min(max(_fit_nll(x, y, 100), 1 / T_LIMIT), T_LIMIT)
        w0 = s[:, None] if self._diagonal else torch.diag(s)
        theta0 = torch.cat([w0, m[:, None]], dim=1).flatten() / t
        blocks = self._curvature(u, y, theta0, m, s)
        eye = torch.eye(blocks.shape[1], dtype=blocks.dtype, device=blocks.device).expand_as(blocks)
        mean = float(blocks.diagonal(dim1=1, dim2=2).mean())
        chol, info = torch.linalg.cholesky_ex(blocks + _RIDGE * mean * eye)
        if not mean > _FLAT or bool(info.any()):  # no curvature to use (softmax saturated at 0 and 1)
            chol = eye

        def precondition(phi: Tensor) -> Tensor:
            return torch.linalg.solve_triangular(chol.mT, phi.view(k, -1, 1), upper=True).flatten()

        theta, grad = minimise_lbfgs(objective, theta0, self.max_iter, precondition=precondition)
        warn_unconverged(who, grad, self.max_iter)
        w, b = original(theta)
        self._weights, self._bias = w.detach().clone(), b.detach().clone()
        if self.off_diagonal == 0 and self.intercept == 0:
            _warn_if_separated(who, g.argmax(1).eq(y), self._map(x, w, b).argmax(1).eq(y))
        return self

    def _params(self) -> dict[str, Any]:
        return {"off_diagonal": self.off_diagonal, "intercept": self.intercept, "max_iter": self.max_iter}

    def _state_keys(self) -> tuple[str, ...]:
        return ("weights", "bias")

    def _state(self) -> dict[str, Tensor] | None:
        return None if self._weights is None else {"weights": self._weights, "bias": self._bias}

    def _set_state(self, state: dict[str, Tensor]) -> None:
        w, b = state["weights"].double(), state["bias"].double()
        k = b.numel()
        want = (k,) if self._diagonal else (k, k)
        if b.dim() != 1 or tuple(w.shape) != want:
            raise ValueError(f"{type(self).__name__} state needs weights of shape {want} and bias ({k},), "
                             f"got {tuple(w.shape)} and {tuple(b.shape)}")
        self._weights, self._bias = w, b

    def _module(self) -> "AffineScalingModule":
        return AffineScalingModule(self.weights, self.bias, log_softmax=self._log_softmax)

    def _checked(self, logits: ArrayLike, method: str) -> Tensor:
        self._fitted(method)
        return check_logits_like(logits, self._bias.numel(), type(self).__name__)

    def transform(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """Calibrated logits ``W x + b``, float64 on the device of ``logits``."""
        g = self._checked(logits, "transform")
        return like_input(self._module().calibrated(g), logits)

    def predict_proba(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """Calibrated probabilities ``softmax(W x + b)``, computed in float64, returned in the logits' dtype."""
        g = self._checked(logits, "predict_proba")
        return like_input(torch.softmax(self._module().calibrated(g), dim=1).to(g.dtype), logits)

    def fit_transform(self, logits: ArrayLike, labels: ArrayLike) -> Tensor | np.ndarray:
        return self.fit(logits, labels).transform(logits)


class AffineScalingModule(CalibrationModule):
    """``g -> W x + b``: vector, matrix or Dirichlet scaling as a module (``returns = "logits"``).

    ``x`` is ``g`` (vector and matrix scaling) or ``log_softmax(g)`` (Dirichlet calibration,
    ``log_softmax=True``); a 1-D ``weight`` is the diagonal of vector scaling. The
    buffers ``weight`` and ``bias`` are float64 as fitted; :meth:`calibrated` gives the
    logits in their dtype, ``forward`` in the input's. ``softmax(module(g))`` is the
    calibrator's ``predict_proba(g)``.
    """

    returns = "logits"

    def __init__(self, weight: Tensor, bias: Tensor, log_softmax: bool = False):
        super().__init__()
        self.log_softmax = bool(log_softmax)
        self.register_buffer("weight", weight.detach().clone())
        self.register_buffer("bias", bias.detach().clone())

    def calibrated(self, logits: Tensor) -> Tensor:
        """``W x + b`` in the buffers' dtype, on the device of ``logits``."""
        w, b = self.weight.to(logits.device), self.bias.to(logits.device)
        x = logits.to(w.dtype)
        if self.log_softmax:
            x = torch.log_softmax(x, dim=1)
        return _affine(x, w, b)

    def forward(self, logits: Tensor) -> Tensor:
        return self.calibrated(logits).to(logits.dtype)

    def extra_repr(self) -> str:
        kind = "vector" if self.weight.dim() == 1 else "matrix"
        return f"K={self.bias.numel()}, {kind}, log_softmax={self.log_softmax}, returns={self.returns!r}"


class VectorScaling(_AffineScaling):
    """Vector scaling, ``p = softmax(w * g + b)`` with a weight and an intercept per class.

    Guo et al. (2017) section 4.2: matrix scaling with ``W`` restricted to a diagonal
    ``w`` (``2K`` parameters). With all ``w_k = 1/T`` and ``b = 0`` it is temperature
    scaling. ``intercept`` is ``mu`` of the ODIR penalty ``mu / K sum_k b_k^2`` (Kull et al.
    2019, section 3); the diagonal is not penalised. Fitted in float64 by L-BFGS from
    temperature scaling, ``w = 1/T, b = 0`` (module docstring). After ``fit``, ``weights``
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

    def _params(self) -> dict[str, Any]:
        return {"intercept": self.intercept, "max_iter": self.max_iter}


class MatrixScaling(_AffineScaling):
    """Matrix scaling, ``p = softmax(W g + b)``, with the ODIR penalty (Kull et al. 2019, section 3).

    Guo et al. (2017) section 4.2 fit a full ``K x K`` matrix ``W`` and intercept ``b``
    on the logits ``g``; with ``K^2 + K`` parameters it overfits a small validation set
    unless regularised. Kull et al. (2019) section 3 penalise only what moves the map away
    from a per-class rescaling: ``off_diagonal / (K (K - 1)) sum_{j != k} W_jk^2 +
    intercept / K sum_k b_k^2`` (their ``lambda`` and ``mu``, picked by cross-validation
    there). Both 0 (the default) is unregularised matrix scaling, i.e. multinomial
    logistic regression on the logits. Fitted in float64 by L-BFGS from temperature
    scaling, ``W = I / T, b = 0`` (module docstring).
    """


class DirichletCalibration(_AffineScaling):
    """Dirichlet calibration, ``p = softmax(W ln q + b)`` with ``q = softmax(g)`` (Kull et al. 2019).

    Kull et al. (2019) section 3: the calibration map of a Dirichlet class-conditional
    model is a linear layer on the log-probabilities, ``mu(q) = softmax(W ln q + b)``,
    fitted by log-loss with the ODIR penalty ``off_diagonal / (K (K - 1)) sum_{j != k}
    W_jk^2 + intercept / K sum_k b_k^2``. It takes logits like every calibrator here and
    computes ``ln q = log_softmax(g)`` itself (no clipping needed), so on log-probabilities
    it is :class:`MatrixScaling`; on logits it differs from matrix scaling by the term
    ``-logsumexp(g) W 1``, which changes from row to row. Fitted as :class:`MatrixScaling`,
    from temperature scaling (``W = I / T, b = 0``).
    """

    _log_softmax = True
