"""Ensemble temperature scaling (Zhang et al. 2020, "Mix-n-Match")."""
from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from scipy.optimize import minimize

from .._checks import ArrayLike
from ._base import CalibrationModule, Calibrator, check_logits_like, fit_inputs, like_input, not_fitted
from .temperature import fit_temperature

__all__ = ["EnsembleTemperatureScaling", "EnsembleTemperatureScalingModule"]

Tensor = torch.Tensor
Loss = Literal["nll", "mse"]
_TINY = 1e-300  # floor of a mixture probability inside the log (only reachable with w_3 = 0)


def _components(g: Tensor, temperature: float | Tensor) -> Tensor:
    """``(3, N, K)`` float64: ``softmax(g / T)``, ``softmax(g)`` and the uniform ``1/K``."""
    g = g.double()
    uniform = torch.full_like(g, 1.0 / g.shape[1])
    return torch.stack([torch.softmax(g / temperature, dim=1), torch.softmax(g, dim=1), uniform])


def _simplex_weights(parts: Tensor, y: Tensor, loss: Loss) -> np.ndarray:
    """Weights on the simplex minimising the mean NLL or Brier score of ``sum_j w_j P_j``.

    Both objectives are convex in ``w`` and need only small summaries of the data: the
    ``(N, 3)`` probabilities of the true class (NLL) or a 3 x 3 Gram matrix (Brier, a
    quadratic ``w'Aw - 2c'w + 1``). Solved by SLSQP on the CPU from ``w = (1, 0, 0)``, the
    temperature-scaled prediction, so the fit never ends worse than temperature scaling.
    """
    at_y = parts.gather(2, y.view(1, -1, 1).expand(3, -1, 1)).squeeze(2).T  # (N, 3)
    if loss == "nll":
        a = at_y.cpu().numpy()

        def fun(w: np.ndarray) -> tuple[float, np.ndarray]:
            mix = np.maximum(a @ w, _TINY)
            return float(-np.mean(np.log(mix))), -(a / mix[:, None]).mean(axis=0)
    else:
        n = parts.shape[1]
        gram = (torch.einsum("jnk,lnk->jl", parts, parts) / n).cpu().numpy()
        c = at_y.mean(dim=0).cpu().numpy()

        def fun(w: np.ndarray) -> tuple[float, np.ndarray]:
            return float(w @ gram @ w - 2 * c @ w + 1.0), 2 * gram @ w - 2 * c

    res = minimize(fun, np.array([1.0, 0.0, 0.0]), jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * 3,
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones(3)}],
                   options={"ftol": 1e-14, "maxiter": 500})
    w = np.clip(res.x, 0.0, 1.0)
    return w / w.sum()


class EnsembleTemperatureScaling(Calibrator):
    """Ensemble temperature scaling, ``p = w_1 softmax(g / T) + w_2 softmax(g) + w_3 / K``.

    Zhang et al. (2020), "Ensemble Temperature Scaling" in their Mix-n-Match section:
    a convex combination of the temperature-scaled, the uncalibrated and the uniform
    prediction. ``T`` is the NLL temperature (:func:`fit_temperature`); then the weights
    ``w`` on the simplex minimise the mean NLL (``loss="nll"``) or Brier score
    (``loss="mse"``) of the mixture on the same validation set. The mixture keeps the
    arg-max of ``g`` whenever ``w_1 + w_2 > 0`` (each component ranks the classes like
    ``g``), gains two degrees of freedom over temperature scaling and, being a convex
    combination, keeps every output a probability vector. ``w = (1, 0, 0)`` is
    temperature scaling. After ``fit``: ``temperature`` (float) and ``weights`` (3 floats).
    """

    def __init__(self, loss: Loss = "nll"):
        if loss not in ("nll", "mse"):
            raise ValueError(f'loss must be "nll" or "mse", got {loss!r}')
        self.loss = loss
        self._temperature: float | None = None
        self._weights: np.ndarray | None = None
        self._num_classes: int | None = None

    def __repr__(self) -> str:
        if self._weights is None:
            return f"EnsembleTemperatureScaling(loss={self.loss!r}, unfitted)"
        w = ", ".join(f"{v:.3g}" for v in self._weights)
        return f"EnsembleTemperatureScaling(loss={self.loss!r}, temperature={self._temperature:.4g}, weights=({w}))"

    @property
    def temperature(self) -> float:
        if self._temperature is None:
            raise not_fitted("EnsembleTemperatureScaling")
        return self._temperature

    @property
    def weights(self) -> tuple[float, float, float]:
        """``(w_1, w_2, w_3)``: temperature-scaled, uncalibrated, uniform."""
        self.temperature  # noqa: B018 - raises when unfitted
        return tuple(float(v) for v in self._weights)

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> "EnsembleTemperatureScaling":
        g, y = fit_inputs(logits, labels, "EnsembleTemperatureScaling")
        t = fit_temperature(g, y, "nll")
        self._weights = _simplex_weights(_components(g, t), y, self.loss)
        self._temperature, self._num_classes = t, g.shape[1]
        return self

    def _params(self) -> dict[str, Any]:
        return {"loss": self.loss}

    def _state_keys(self) -> tuple[str, ...]:
        return ("temperature", "weights", "num_classes")

    def _state(self) -> dict[str, Tensor] | None:
        if self._weights is None:
            return None
        return {"temperature": torch.tensor(self._temperature, dtype=torch.float64),
                "weights": torch.tensor(self._weights, dtype=torch.float64),
                "num_classes": torch.tensor(self._num_classes)}

    def _set_state(self, state: dict[str, Tensor]) -> None:
        w = state["weights"].double()
        if w.shape != (3,) or bool((w < 0).any()) or abs(float(w.sum()) - 1) > 1e-9:
            raise ValueError(f"EnsembleTemperatureScaling state needs 3 weights on the simplex, got {w.tolist()}")
        self._temperature = float(state["temperature"])
        self._weights, self._num_classes = w.numpy(), int(state["num_classes"])

    def _module(self) -> "EnsembleTemperatureScalingModule":
        state = self._state()
        return EnsembleTemperatureScalingModule(state["temperature"], state["weights"])

    def predict_proba(self, logits: ArrayLike) -> Tensor | np.ndarray:
        """The fitted mixture, computed in float64 and returned in the logits' dtype."""
        self._fitted("predict_proba")
        g = check_logits_like(logits, self._num_classes, "EnsembleTemperatureScaling")
        return like_input(self._module()(g), logits)


class EnsembleTemperatureScalingModule(CalibrationModule):
    """``g -> w_1 softmax(g / T) + w_2 softmax(g) + w_3 / K``, ensemble temperature scaling as a module.

    ``returns = "probabilities"``: the mixture of probabilities has no logits of its own,
    so ``forward`` gives :meth:`EnsembleTemperatureScaling.predict_proba` itself. Buffers:
    ``temperature`` (scalar) and ``weights`` ``(3,)``, float64.
    """

    returns = "probabilities"

    def __init__(self, temperature: float | Tensor, weights: Tensor):
        super().__init__()
        self.register_buffer("temperature", torch.as_tensor(temperature, dtype=torch.float64).detach().clone())
        self.register_buffer("weights", torch.as_tensor(weights, dtype=torch.float64).detach().clone())

    def forward(self, logits: Tensor) -> Tensor:
        w, t = self.weights.to(logits.device), self.temperature.to(logits.device)
        return torch.einsum("j,jnk->nk", w, _components(logits.to(w.dtype), t)).to(logits.dtype)

    def extra_repr(self) -> str:
        w = ", ".join(f"{v:.4g}" for v in self.weights.tolist())
        return f"temperature={float(self.temperature):.6g}, weights=({w}), returns={self.returns!r}"
