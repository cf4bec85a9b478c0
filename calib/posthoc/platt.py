"""Platt scaling for two classes: a logistic regression on the score ``s = g_1 - g_0``."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .._checks import ArrayLike, check_positive_int
from ._base import check_logits_like, fit_inputs, minimise_lbfgs, not_fitted, warn_unconverged

__all__ = ["PlattScaling"]

Tensor = torch.Tensor


class PlattScaling:
    """Platt scaling, ``P(y = 1 | s) = sigmoid(a s + b)`` on the binary score ``s = g_1 - g_0``.

    Platt (1999) section 2: fit ``(a, b)`` by the log-loss against the targets ``t_i``.
    With ``smooth_targets=True`` (the default; Platt (1999) section 2) the targets
    are ``t = (N_+ + 1) / (N_+ + 2)`` for positives and ``t = 1 / (N_- + 2)`` for
    negatives, an out-of-sample prior that keeps ``(a, b)`` finite on separable data;
    this is scikit-learn's ``CalibratedClassifierCV(method="sigmoid")``. With
    ``smooth_targets=False`` the targets are the labels and the fit is unpenalised logistic
    regression on ``s`` (both tested against scikit-learn). For ``K = 2`` logits ``s`` is
    the log-odds, so ``a = 1/T, b = 0`` is temperature scaling. Fitted by L-BFGS in
    float64 on the logits' device.
    """

    def __init__(self, smooth_targets: bool = True, max_iter: int = 200):
        if not isinstance(smooth_targets, bool):
            raise TypeError(f"smooth_targets must be a bool, got {type(smooth_targets).__name__}")
        self.smooth_targets = smooth_targets
        self.max_iter = check_positive_int(max_iter, "max_iter")
        self._coef: tuple[float, float] | None = None

    def __repr__(self) -> str:
        state = "unfitted" if self._coef is None else f"a={self._coef[0]:.4g}, b={self._coef[1]:.4g}"
        return f"PlattScaling(smooth_targets={self.smooth_targets}, {state})"

    @property
    def coef(self) -> tuple[float, float]:
        """Fitted ``(a, b)`` of ``sigmoid(a s + b)``."""
        if self._coef is None:
            raise not_fitted("PlattScaling")
        return self._coef

    @staticmethod
    def _two_classes(g: Tensor) -> Tensor:
        if g.shape[1] != 2:
            raise ValueError(f"PlattScaling needs K = 2 classes, got K = {g.shape[1]}; for more classes use "
                             "TemperatureScaling, VectorScaling or MatrixScaling")
        return g

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> "PlattScaling":
        g, y = fit_inputs(logits, labels, "PlattScaling")
        g = self._two_classes(g).double()
        s = g[:, 1] - g[:, 0]
        t = y.double()
        if self.smooth_targets:
            pos = float(t.sum())
            neg = len(t) - pos
            t = torch.where(y == 1, (pos + 1) / (pos + 2), 1 / (neg + 2)).double()

        def objective(theta: Tensor) -> Tensor:
            return F.binary_cross_entropy_with_logits(theta[0] * s + theta[1], t)

        theta0 = torch.tensor([1.0, 0.0], dtype=torch.float64, device=s.device)
        theta, grad = minimise_lbfgs(objective, theta0, self.max_iter)
        warn_unconverged("PlattScaling", grad, self.max_iter)
        self._coef = (float(theta[0]), float(theta[1]))
        return self

    def _score(self, g: Tensor) -> Tensor:
        a, b = self._coef
        return a * (g[:, 1].double() - g[:, 0].double()) + b

    def transform(self, logits: ArrayLike) -> Tensor:
        """Calibrated log-odds ``a s + b``, float64 ``(N,)``."""
        self.coef  # noqa: B018 - raises when unfitted
        return self._score(check_logits_like(logits, 2, "PlattScaling"))

    def predict_proba(self, logits: ArrayLike) -> Tensor:
        """``[1 - sigmoid(a s + b), sigmoid(a s + b)]``, ``(N, 2)`` in the logits' dtype."""
        self.coef  # noqa: B018 - raises when unfitted
        g = check_logits_like(logits, 2, "PlattScaling")
        z = self._score(g)
        return torch.stack([torch.sigmoid(-z), torch.sigmoid(z)], dim=1).to(g.dtype)
