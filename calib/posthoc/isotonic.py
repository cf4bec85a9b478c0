"""Isotonic regression one-vs-rest (Zadrozny & Elkan 2002), with scikit-learn's pool-adjacent-violators fit."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.isotonic import IsotonicRegression

from .._checks import ArrayLike
from ._base import CalibrationModule, Calibrator, check_logits_like, fit_inputs, like_input, not_fitted

__all__ = ["IsotonicCalibration", "IsotonicCalibrationModule"]

Tensor = torch.Tensor


class IsotonicCalibration(Calibrator):
    """One-vs-rest isotonic calibration of ``q = softmax(g)``, rows renormalised.

    Zadrozny & Elkan (2002): for each class ``k`` fit the non-decreasing step function
    ``f_k`` minimising ``sum_i (f_k(q_ik) - 1[y_i = k])^2`` (pool adjacent violators,
    scikit-learn's :class:`~sklearn.isotonic.IsotonicRegression`: linear between its
    thresholds, scores outside the validation range clipped to its ends), then ``p_ik =
    f_k(q_ik) / sum_j f_j(q_ij)``; a row whose ``f_j`` are all 0 gets the uniform ``1/K``
    (scikit-learn's ``CalibratedClassifierCV(method="isotonic")`` does the same, tested).
    Non-parametric: it can fix any monotone miscalibration per class, but it needs more
    validation data than a parametric map, its output is piecewise constant (ties can
    change the arg-max), and each class is calibrated separately. Fitted on the CPU; the
    maps are then evaluated in torch (:class:`IsotonicCalibrationModule`, equal to
    scikit-learn's ``predict``) on the logits' device, returned in their dtype.
    """

    def __init__(self) -> None:
        self._models: list[IsotonicRegression] | None = None
        self._table: dict[str, Tensor] | None = None

    def __repr__(self) -> str:
        fitted = "unfitted" if self._table is None else f"fitted on K = {self._table['lengths'].numel()}"
        return f"IsotonicCalibration({fitted})"

    @property
    def models(self) -> list[IsotonicRegression]:
        """The fitted per-class maps ``f_k`` (scikit-learn estimators; rebuilt from the thresholds after loading)."""
        table = self._table
        if table is None:
            raise not_fitted("IsotonicCalibration")
        if self._models is None:  # loaded from a state_dict: refitting on the thresholds gives them back
            self._models = [
                IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(x[:n].numpy(), v[:n].numpy())
                for x, v, n in zip(table["thresholds"], table["values"], table["lengths"].tolist())
            ]
        return self._models

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> "IsotonicCalibration":
        g, y = fit_inputs(logits, labels, "IsotonicCalibration")
        q = torch.softmax(g.double(), dim=1).cpu().numpy()
        hits = y.cpu().numpy()[:, None] == np.arange(g.shape[1])
        models = [
            IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(q[:, k], hits[:, k].astype(np.float64))
            for k in range(g.shape[1])
        ]
        self._set_state(_thresholds(models))
        self._models = models
        return self

    def _params(self) -> dict[str, Any]:
        return {}

    def _state_keys(self) -> tuple[str, ...]:
        return ("thresholds", "values", "lengths")

    def _state(self) -> dict[str, Tensor] | None:
        return self._table

    def _set_state(self, state: dict[str, Tensor]) -> None:
        x, v, n = state["thresholds"].double(), state["values"].double(), state["lengths"].long()
        if x.dim() != 2 or x.shape != v.shape or n.shape != (x.shape[0],) or bool((n < 1).any()) \
                or bool((n > x.shape[1]).any()):
            raise ValueError("IsotonicCalibration state needs thresholds and values (K, M) and lengths (K,) in [1, M]")
        self._table, self._models = {"thresholds": x, "values": v, "lengths": n}, None

    def _module(self) -> "IsotonicCalibrationModule":
        return IsotonicCalibrationModule(**self._table)

    def predict_proba(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """Calibrated probabilities ``f_k(q_k) / sum_j f_j(q_j)`` in the logits' dtype and device."""
        self._fitted("predict_proba")
        g = check_logits_like(logits, self._table["lengths"].numel(), "IsotonicCalibration")
        return like_input(self._module()(g), logits)


def _thresholds(models: list[IsotonicRegression]) -> dict[str, Tensor]:
    """Each ``f_k`` as its thresholds and values, rows padded to one width: ``x`` with +inf, ``f`` with its last value."""
    width = max(2, *(len(m.X_thresholds_) for m in models))
    x = torch.full((len(models), width), torch.inf, dtype=torch.float64)
    v = torch.zeros(len(models), width, dtype=torch.float64)
    for k, m in enumerate(models):
        n = len(m.X_thresholds_)
        x[k, :n] = torch.from_numpy(np.asarray(m.X_thresholds_, dtype=np.float64))
        v[k, :n] = torch.from_numpy(np.asarray(m.y_thresholds_, dtype=np.float64))
        v[k, n:] = v[k, n - 1]
    return {"thresholds": x, "values": v, "lengths": torch.tensor([len(m.X_thresholds_) for m in models])}


class IsotonicCalibrationModule(CalibrationModule):
    """Isotonic calibration as a module: ``g -> f_k(softmax(g)_k)`` renormalised (``returns = "probabilities"``).

    Each ``f_k`` is piecewise linear through its thresholds ``(x_kj, f_kj)`` (buffers
    ``thresholds`` and ``values``, ``(K, M)`` float64, row ``k`` using its first
    ``lengths[k]`` entries) and constant beyond its ends: the interpolation of
    scikit-learn's :class:`~sklearn.isotonic.IsotonicRegression` (``scipy.interpolate.interp1d``,
    same arithmetic), in torch, so it runs on any device. Binned maps have no logits, so
    ``forward`` gives :meth:`IsotonicCalibration.predict_proba` itself.
    """

    returns = "probabilities"

    def __init__(self, thresholds: Tensor, values: Tensor, lengths: Tensor):
        super().__init__()
        self.register_buffer("thresholds", thresholds.detach().clone())
        self.register_buffer("values", values.detach().clone())
        self.register_buffer("lengths", lengths.detach().clone())

    def forward(self, logits: Tensor) -> Tensor:
        x, v, n = (b.to(logits.device) for b in (self.thresholds, self.values, self.lengths))
        q = torch.softmax(logits.to(x.dtype), dim=1).T.contiguous()  # (K, N)
        q = torch.minimum(torch.maximum(q, x[:, :1]), x.gather(1, (n - 1)[:, None]))  # clip to [x_k1, x_kL]
        hi = torch.minimum(torch.searchsorted(x, q).clamp_min(1), (n - 1).clamp_min(1)[:, None])
        lo = hi - 1
        x0, x1, f0, f1 = x.gather(1, lo), x.gather(1, hi), v.gather(1, lo), v.gather(1, hi)
        f = ((f1 - f0) / (x1 - x0) * (q - x0) + f0).T  # as interp1d: slope * (x - x_lo) + y_lo
        total = f.sum(dim=1, keepdim=True)
        p = torch.where(total > 0, f / torch.where(total > 0, total, 1.0), 1.0 / f.shape[1])
        return p.to(logits.dtype)

    def extra_repr(self) -> str:
        return f"K={self.lengths.numel()}, thresholds<={self.thresholds.shape[1]}, returns={self.returns!r}"
