"""Isotonic regression one-vs-rest (Zadrozny & Elkan 2002), with scikit-learn's pool-adjacent-violators fit."""
from __future__ import annotations

import numpy as np
import torch
from sklearn.isotonic import IsotonicRegression

from .._checks import ArrayLike
from ._base import check_logits_like, fit_inputs, not_fitted

__all__ = ["IsotonicCalibration"]

Tensor = torch.Tensor


class IsotonicCalibration:
    """One-vs-rest isotonic calibration of ``q = softmax(g)``, rows renormalised.

    Zadrozny & Elkan (2002): for each class ``k`` fit the non-decreasing step function
    ``f_k`` minimising ``sum_i (f_k(q_ik) - 1[y_i = k])^2`` (pool adjacent violators,
    scikit-learn's :class:`~sklearn.isotonic.IsotonicRegression`, scores outside the
    validation range clipped to its ends), then ``p_ik = f_k(q_ik) / sum_j f_j(q_ij)``; a
    row whose ``f_j`` are all 0 gets the uniform ``1/K`` (scikit-learn's
    ``CalibratedClassifierCV(method="isotonic")`` does the same, tested). Non-parametric:
    it can fix any monotone miscalibration per class, but it needs more validation data
    than a parametric map, its output is piecewise constant (ties can change the
    arg-max), and each class is calibrated separately. Fitted on the CPU; outputs go to
    the logits' device and dtype.
    """

    def __init__(self) -> None:
        self._models: list[IsotonicRegression] | None = None

    def __repr__(self) -> str:
        return f"IsotonicCalibration({'unfitted' if self._models is None else f'fitted on K = {len(self._models)}'})"

    @property
    def models(self) -> list[IsotonicRegression]:
        """The fitted per-class maps ``f_k`` (scikit-learn estimators)."""
        if self._models is None:
            raise not_fitted("IsotonicCalibration")
        return self._models

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> "IsotonicCalibration":
        g, y = fit_inputs(logits, labels, "IsotonicCalibration")
        q = torch.softmax(g.double(), dim=1).cpu().numpy()
        hits = y.cpu().numpy()[:, None] == np.arange(g.shape[1])
        self._models = [
            IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(q[:, k], hits[:, k].astype(np.float64))
            for k in range(g.shape[1])
        ]
        return self

    def predict_proba(self, logits: ArrayLike) -> Tensor:
        """Calibrated probabilities ``f_k(q_k) / sum_j f_j(q_j)`` in the logits' dtype and device."""
        models = self.models
        g = check_logits_like(logits, len(models), "IsotonicCalibration")
        q = torch.softmax(g.double(), dim=1).cpu().numpy()
        f = np.column_stack([m.predict(q[:, k]) for k, m in enumerate(models)])
        total = f.sum(axis=1, keepdims=True)
        p = np.divide(f, total, out=np.full_like(f, 1.0 / f.shape[1]), where=total > 0)
        return torch.from_numpy(p).to(device=g.device, dtype=g.dtype)
