"""Platt scaling for two classes: a logistic regression on the score ``s = g_1 - g_0``."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._checks import ArrayLike, check_positive_int
from ._base import (
    CalibrationModule,
    Calibrator,
    check_logits_like,
    fit_inputs,
    like_input,
    minimise_lbfgs,
    not_fitted,
    warn_unconverged,
)

__all__ = ["PlattScaling", "PlattScalingModule"]

Tensor = torch.Tensor


class PlattScaling(Calibrator):
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

    def _params(self) -> dict[str, Any]:
        return {"smooth_targets": self.smooth_targets, "max_iter": self.max_iter}

    def _state_keys(self) -> tuple[str, ...]:
        return ("coef",)

    def _state(self) -> dict[str, Tensor] | None:
        return None if self._coef is None else {"coef": torch.tensor(self._coef, dtype=torch.float64)}

    def _set_state(self, state: dict[str, Tensor]) -> None:
        coef = state["coef"].double()
        if coef.shape != (2,) or not bool(torch.isfinite(coef).all()):
            raise ValueError(f"PlattScaling state needs coef = (a, b), two finite numbers, got {coef.tolist()}")
        self._coef = (float(coef[0]), float(coef[1]))

    def _module(self) -> "PlattScalingModule":
        return PlattScalingModule(self._state()["coef"])

    def _checked(self, logits: ArrayLike, method: str) -> Tensor:
        self._fitted(method)
        return check_logits_like(logits, 2, "PlattScaling")

    def transform(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """Calibrated log-odds ``a s + b``, float64 ``(N,)``."""
        g = self._checked(logits, "transform")
        return like_input(self._module().score(g), logits)

    def predict_proba(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """``[1 - sigmoid(a s + b), sigmoid(a s + b)]``, ``(N, 2)`` in the logits' dtype."""
        g = self._checked(logits, "predict_proba")
        z = self._module().score(g)
        return like_input(torch.stack([torch.sigmoid(-z), torch.sigmoid(z)], dim=1).to(g.dtype), logits)


class PlattScalingModule(CalibrationModule):
    """``g -> [0, a (g_1 - g_0) + b]``: Platt scaling as a module (``returns = "logits"``).

    The softmax of ``[0, z]`` is ``[sigmoid(-z), sigmoid(z)]``, :meth:`PlattScaling.predict_proba`.
    The buffer ``coef`` holds ``(a, b)`` in float64.
    """

    returns = "logits"

    def __init__(self, coef: Tensor):
        super().__init__()
        self.register_buffer("coef", torch.as_tensor(coef, dtype=torch.float64).detach().clone())

    def score(self, logits: Tensor) -> Tensor:
        """The calibrated log-odds ``a (g_1 - g_0) + b``, ``(N,)`` in the buffer's dtype."""
        coef = self.coef.to(logits.device)
        g = logits.to(coef.dtype)
        return coef[0] * (g[:, 1] - g[:, 0]) + coef[1]

    def forward(self, logits: Tensor) -> Tensor:
        z = self.score(logits)
        return torch.stack([torch.zeros_like(z), z], dim=1).to(logits.dtype)

    def extra_repr(self) -> str:
        return f"a={float(self.coef[0]):.6g}, b={float(self.coef[1]):.6g}, returns={self.returns!r}"
